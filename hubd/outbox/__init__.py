"""The outbox: device changes become platform events (`decide`), stored durably (`writer`), delivered in order
(`lanes`, the pending rows' index; `sender` and `delivery`, the sending). Its table: `hubd.store.outbox`."""
