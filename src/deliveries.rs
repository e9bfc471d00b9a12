//! `callback_deliveries`: the raw verified body of each first delivery with what the gateway
//! did with it, kept permanently so finance can see, export and replay provider events. The
//! callback path writes it ([`crate::payments::delivery`]); this module reads it: the event
//! log with its filters and views (`read`) and the delivery minutes of the console (`minutes`).

pub mod minutes;
pub mod read;
