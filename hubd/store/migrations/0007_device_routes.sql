-- 0007: where each device came from and where its commands go (the device dialects).
-- dialect: "native" (hubd's own topics), "homeassistant" or "zigbee2mqtt"; address: what that dialect
-- needs to reach the device (JSON or, for native devices, the id in the topic; '' = the endpointId);
-- origin: its entities, exported or not and why, for the status page.
ALTER TABLE devices ADD COLUMN dialect TEXT NOT NULL DEFAULT 'native';
ALTER TABLE devices ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE devices ADD COLUMN origin TEXT NOT NULL DEFAULT '{}';
