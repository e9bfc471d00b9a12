//! The four roles, each including the one before: what a person may see and do in `/admin`
//! and the console (docs/access.md has the table of routes).

use std::fmt;

/// A role; the order is inclusion (`Admin` includes every other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads: events, event detail, attention, balances, notifications, idempotency records.
    Viewer,
    /// + the export, and replay of stored events.
    Finance,
    /// + redelivery, refund-request resolution, endpoint enable and disable.
    Operator,
    /// + the audit log, operators, and merchants' endpoints.
    Admin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Finance, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Finance => "finance",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Role::ALL.into_iter().find(|role| role.as_str() == text)
    }

    /// True when a holder of this role may do what `needed` may.
    pub fn includes(self, needed: Role) -> bool {
        self >= needed
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_includes_the_ones_before_it_and_no_later_one() {
        for (i, role) in Role::ALL.iter().enumerate() {
            for (j, needed) in Role::ALL.iter().enumerate() {
                assert_eq!(role.includes(*needed), i >= j, "{role} vs {needed}");
            }
        }
    }

    #[test]
    fn roles_round_trip_through_their_names_and_nothing_else_parses() {
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("Admin"), None);
        assert_eq!(Role::parse("root"), None);
    }
}
