-- 0012: the owner exposes what hubd keeps back by rule (a diagnostic or config entity that is a real device
-- function, e.g. rtl_433's diagnostic door contact): `revealed` 1 hands the endpointId to the dialects, which then
-- export its kept-back entities (never a maintenance action: restart, erase, reset, update, identify).
ALTER TABLE device_overrides ADD COLUMN revealed INTEGER NOT NULL DEFAULT 0;
