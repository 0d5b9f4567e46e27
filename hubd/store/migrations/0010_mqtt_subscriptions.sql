-- The topic filters hubd's persistent MQTT session is subscribed to: on a reconnect to a session the broker kept,
-- those no dialect needs any more are unsubscribed (the broker cannot be asked for them).
CREATE TABLE mqtt_subscriptions (
    filter TEXT PRIMARY KEY
) WITHOUT ROWID;
