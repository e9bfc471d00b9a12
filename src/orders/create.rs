//! `order.create`: a validated request inserted as a pending order, inside the idempotency
//! transaction.

use diesel::prelude::*;
use diesel_async::AsyncPgConnection;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::model::{NewOrder, Order, OrderStatus};
use super::request::{OrderRejection, ValidOrder};
use crate::db::one_row::CommittedResult;
use crate::idempotency::IdempotentWork;
use crate::idempotency::error::IdempotencyError;
use crate::schema::orders;

/// `order.create` for one user and raw body, run inside the idempotency transaction.
pub struct CreateOrder<'a> {
    pub user_id: i64,
    pub body: &'a [u8],
}

impl IdempotentWork for CreateOrder<'_> {
    /// The created order, or why it was refused.
    type Output = Result<Order, OrderRejection>;

    fn run<'c>(
        &'c self,
        conn: &'c mut AsyncPgConnection,
    ) -> BoxFuture<'c, Result<Self::Output, IdempotencyError>> {
        async move {
            let valid = match ValidOrder::parse(self.body) {
                Ok(valid) => valid,
                Err(rejection) => return Ok(Err(rejection)),
            };
            let order: Order = diesel::insert_into(orders::table)
                .values(NewOrder {
                    user_id: self.user_id,
                    amount_minor: valid.amount.get(),
                    currency: valid.currency.code(),
                    reference: valid.reference.as_deref(),
                    status: OrderStatus::PendingPayment.as_str(),
                })
                .returning(Order::as_returning())
                .committed_result(conn)
                .await?;
            Ok(Ok(order))
        }
        .boxed()
    }
}
