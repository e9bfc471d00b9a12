//! Text from outside (providers, clients, operators) that the database keeps as it is:
//! PostgreSQL's TEXT and JSONB refuse U+0000, and an id holding a control character could never
//! be matched or shown faithfully.

/// Whether `s` can be stored and matched as it is: 1 to `max` bytes, no control characters.
pub fn storable(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control)
}

/// `s` with each control character shown as U+FFFD, so it can always be stored.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storable_text_is_non_empty_bounded_and_free_of_control_characters() {
        assert!(storable("re_1", 255));
        assert!(!storable("", 255));
        assert!(!storable(&"r".repeat(256), 255));
        assert!(!storable("re\u{0}1", 255));
        assert!(!storable("re\n1", 255));
    }

    #[test]
    fn printable_text_shows_control_characters_as_replacement_characters() {
        assert_eq!(printable("a\u{0}b\r\n"), "a\u{fffd}b\u{fffd}\u{fffd}");
    }
}
