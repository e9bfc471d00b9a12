//! Orders (`order.create`): the `orders` table ([`model`]), a create request's validation
//! ([`request`]), and the idempotent creation ([`create`]).

pub mod create;
pub mod model;
pub mod request;
