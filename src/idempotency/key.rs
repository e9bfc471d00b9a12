//! The client's `Idempotency-Key` header value.

/// Why an `Idempotency-Key` header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the Idempotency-Key header is missing or empty")]
    Missing,
    #[error("the Idempotency-Key must be 1 to 128 characters, got {0}")]
    BadLength(usize),
    #[error("the Idempotency-Key may hold only visible ASCII characters")]
    BadCharacters,
}

/// 1 to 128 visible ASCII characters. The quoted Structured-Field string form `"abc"`
/// (as in the IETF Idempotency-Key draft) is accepted and means `abc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

pub const MAX_KEY_LEN: usize = 128;

impl IdempotencyKey {
    pub fn parse(raw: Option<&[u8]>) -> Result<Self, KeyError> {
        let raw = raw.filter(|r| !r.is_empty()).ok_or(KeyError::Missing)?;
        let inner = match raw {
            [b'"', inner @ .., b'"'] => unescape_sf_string(inner)?,
            _ => raw.to_vec(),
        };
        if inner.is_empty() {
            return Err(KeyError::Missing);
        }
        if !inner.iter().all(|b| b.is_ascii_graphic()) {
            return Err(KeyError::BadCharacters);
        }
        if inner.len() > MAX_KEY_LEN {
            return Err(KeyError::BadLength(inner.len()));
        }
        // All bytes are ASCII, so this conversion cannot fail.
        String::from_utf8(inner)
            .map(Self)
            .map_err(|_| KeyError::BadCharacters)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

// RFC 8941 sf-string: `\"` and `\\` are the only escapes; a bare `"` inside is invalid.
fn unescape_sf_string(inner: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped),
                _ => return Err(KeyError::BadCharacters),
            },
            b'"' => return Err(KeyError::BadCharacters),
            _ => out.push(b),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<String, KeyError> {
        IdempotencyKey::parse(Some(s.as_bytes())).map(|k| k.as_str().to_owned())
    }

    #[test]
    fn a_plain_key_is_accepted() {
        assert_eq!(parse("order-77_a.b~c").unwrap(), "order-77_a.b~c");
    }

    #[test]
    fn a_quoted_structured_field_key_means_its_content() {
        assert_eq!(parse("\"abc\"").unwrap(), "abc");
        assert_eq!(parse(r#""a\"b""#).unwrap(), "a\"b");
    }

    #[test]
    fn a_missing_or_empty_key_is_missing() {
        assert_eq!(IdempotencyKey::parse(None), Err(KeyError::Missing));
        assert_eq!(parse(""), Err(KeyError::Missing));
        assert_eq!(parse("\"\""), Err(KeyError::Missing));
    }

    #[test]
    fn a_key_of_exactly_128_chars_is_accepted() {
        assert!(parse(&"k".repeat(128)).is_ok());
    }

    #[test]
    fn a_key_longer_than_128_chars_is_rejected() {
        assert_eq!(parse(&"k".repeat(129)), Err(KeyError::BadLength(129)));
    }

    #[test]
    fn spaces_control_characters_and_non_ascii_are_rejected() {
        assert_eq!(parse("a b"), Err(KeyError::BadCharacters));
        assert_eq!(parse("a\tb"), Err(KeyError::BadCharacters));
        assert_eq!(
            IdempotencyKey::parse(Some("clé".as_bytes())),
            Err(KeyError::BadCharacters)
        );
        assert_eq!(parse(r#""a"b""#), Err(KeyError::BadCharacters));
    }
}
