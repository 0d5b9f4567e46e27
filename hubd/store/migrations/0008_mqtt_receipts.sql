-- 0008: the QoS 1 device messages of the last few committed batches, so that the broker's redelivery of
-- a message whose effects are already stored (hubd died between the commit and the PUBACK) is recognised
-- and acknowledged without applying it again. mid: the MQTT packet id; digest: CRC-32 of the payload;
-- batch: a counter of commits; rows of older batches are deleted.
CREATE TABLE mqtt_receipts (
    mid INTEGER PRIMARY KEY,
    topic TEXT NOT NULL,
    digest INTEGER NOT NULL,
    batch INTEGER NOT NULL
);
CREATE INDEX mqtt_receipts_batch ON mqtt_receipts (batch);
