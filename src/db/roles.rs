//! The role the gateway serves as, as the database sees it. The runtime role on `[database]
//! url` should own nothing: a role that owns a table (or may act as its owner) can ALTER, DROP
//! or TRUNCATE it and disable the audit log's append-only triggers, and a superuser can do
//! anything. `check-config` and `serve`'s start-up log say so (docs/deploying.md).

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bool, Text};
use diesel_async::AsyncPgConnection;

use crate::db::one_row::CommittedResult;

/// What the connected role may do beyond reading and writing rows.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct RuntimeRole {
    #[diesel(sql_type = Text)]
    pub name: String,
    #[diesel(sql_type = Bool)]
    pub superuser: bool,
    /// Tables of the gateway's schema it owns, or whose owner it is a member of (it may
    /// `SET ROLE` to it).
    #[diesel(sql_type = BigInt)]
    pub owned_tables: i64,
}

const INSPECT_SQL: &str = "\
    SELECT current_user::TEXT AS name, r.rolsuper AS superuser, \
           (SELECT count(*) FROM pg_class c \
            WHERE c.relnamespace = current_schema()::regnamespace \
              AND c.relkind IN ('r', 'p') \
              AND pg_has_role(current_user, c.relowner, 'MEMBER')) AS owned_tables \
    FROM pg_roles r WHERE r.rolname = current_user";

/// The connected role.
pub async fn inspect(conn: &mut AsyncPgConnection) -> diesel::QueryResult<RuntimeRole> {
    diesel::sql_query(INSPECT_SQL).committed_result(conn).await
}

impl RuntimeRole {
    /// One sentence per reason this role is more than a runtime role; none when it owns
    /// nothing and is no superuser.
    pub fn warnings(&self) -> Vec<String> {
        let name = &self.name;
        if self.superuser {
            return vec![format!(
                "the runtime role {name} ([database] url) is a superuser: whoever holds that URL can change or remove anything, the audit log included; serve as a role that owns nothing and run migrations with [database] migrate_url (docs/deploying.md#two-database-roles)"
            )];
        }
        if self.owned_tables > 0 {
            return vec![format!(
                "the runtime role {name} ([database] url) owns {} table(s) or may act as their owner: whoever holds that URL can ALTER, DROP or TRUNCATE them and disable the audit log's triggers; serve as a role that owns nothing and run migrations with [database] migrate_url (docs/deploying.md#two-database-roles)",
                self.owned_tables
            )];
        }
        Vec::new()
    }

    /// For the `check-config` summary: `gateway (owns no table, not a superuser)`.
    pub fn describe(&self) -> String {
        match (self.superuser, self.owned_tables) {
            (true, _) => format!("{} (a superuser)", self.name),
            (false, 0) => format!("{} (owns no table, not a superuser)", self.name),
            (false, n) => format!("{} (owns {n} table(s))", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(superuser: bool, owned_tables: i64) -> RuntimeRole {
        RuntimeRole {
            name: "gateway".into(),
            superuser,
            owned_tables,
        }
    }

    #[test]
    fn a_role_that_owns_nothing_gets_no_warning() {
        assert!(role(false, 0).warnings().is_empty());
    }

    #[test]
    fn a_superuser_or_an_owner_is_warned_about_once() {
        let superuser = role(true, 20).warnings();
        assert_eq!(superuser.len(), 1);
        assert!(superuser[0].contains("is a superuser"), "{superuser:?}");
        let owner = role(false, 20).warnings();
        assert_eq!(owner.len(), 1);
        assert!(owner[0].contains("owns 20 table(s)"), "{owner:?}");
    }
}
