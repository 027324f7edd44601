use thiserror::Error;

/// The longest `Idempotency-Key` the API accepts, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// A validated `Idempotency-Key`: 1–255 visible ASCII characters (0x21–0x7E).
///
/// The key is compared byte for byte: `abc` and `ABC` are two keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header value is not an `Idempotency-Key`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The header is present but empty.
    #[error("the Idempotency-Key is empty")]
    Empty,
    /// Longer than [`MAX_KEY_LEN`].
    #[error("the Idempotency-Key is {0} bytes long; at most 255 are allowed")]
    TooLong(usize),
    /// A byte outside visible ASCII (0x21–0x7E), e.g. a space or a non-ASCII letter.
    #[error("the Idempotency-Key has byte 0x{byte:02x} at position {at}; only visible ASCII (0x21-0x7E) is allowed")]
    BadByte {
        /// The offending byte.
        byte: u8,
        /// Its zero-based position.
        at: usize,
    },
    /// A value that opens with `"` but is not an RFC 8941 sf-string.
    #[error("the Idempotency-Key is not a valid structured-field string: {0}")]
    BadString(&'static str),
}

impl IdempotencyKey {
    /// Validates a raw header value.
    pub fn parse(raw: &str) -> Result<Self, KeyError> {
        if raw.is_empty() {
            return Err(KeyError::Empty);
        }
        if raw.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong(raw.len()));
        }
        if let Some((at, &byte)) = raw
            .as_bytes()
            .iter()
            .enumerate()
            .find(|(_, b)| !(0x21..=0x7e).contains(*b))
        {
            return Err(KeyError::BadByte { byte, at });
        }
        Ok(Self(raw.to_owned()))
    }

    /// Reads the header value. The IETF draft writes the key as an RFC 8941 sf-string
    /// (`"8e03978e-…"`); the bare form (`8e03978e-…`) is accepted too, and both name the
    /// same key. A value that opens with `"` must be a valid sf-string.
    pub fn from_header(raw: &str) -> Result<Self, KeyError> {
        let raw = raw.trim_matches([' ', '\t']);
        match raw.strip_prefix('"') {
            None => Self::parse(raw),
            Some(quoted) => Self::parse(&sf_string(quoted)?),
        }
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The content of an sf-string after its opening quote (RFC 8941 §4.2.5): printable
/// ASCII, `\\` and `\"` the only escapes, nothing after the closing quote.
fn sf_string(quoted: &str) -> Result<String, KeyError> {
    let mut out = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('"' | '\\')) => out.push(escaped),
                _ => return Err(KeyError::BadString("a backslash may only escape \" or \\")),
            },
            '"' if chars.as_str().is_empty() => return Ok(out),
            '"' => return Err(KeyError::BadString("nothing may follow the closing quote")),
            ' '..='~' => out.push(c),
            _ => return Err(KeyError::BadString("only printable ASCII may appear")),
        }
    }
    Err(KeyError::BadString("the closing quote is missing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_visible_ascii_up_to_255() {
        assert!(IdempotencyKey::parse("a").is_ok());
        assert!(IdempotencyKey::parse("018f2c1e-7b7a-7cc3-9a51-3f1d0e4b5a6c").is_ok());
        assert!(IdempotencyKey::parse(&"~".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~").is_ok());
    }

    #[test]
    fn rejects_empty_long_and_invisible() {
        assert_eq!(IdempotencyKey::parse(""), Err(KeyError::Empty));
        assert_eq!(
            IdempotencyKey::parse(&"k".repeat(256)),
            Err(KeyError::TooLong(256))
        );
        assert_eq!(
            IdempotencyKey::parse("a b"),
            Err(KeyError::BadByte { byte: 0x20, at: 1 })
        );
        assert_eq!(
            IdempotencyKey::parse("tab\t"),
            Err(KeyError::BadByte { byte: 0x09, at: 3 })
        );
        assert!(matches!(
            IdempotencyKey::parse("ké"),
            Err(KeyError::BadByte { at: 1, .. })
        ));
        assert!(IdempotencyKey::parse("\u{7f}").is_err());
    }

    #[test]
    fn the_quoted_and_bare_forms_name_the_same_key() {
        let bare = IdempotencyKey::from_header("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap();
        let quoted =
            IdempotencyKey::from_header("\"8e03978e-40d5-43e8-bc93-6894a57f9324\"").unwrap();
        assert_eq!(bare, quoted);
        assert_eq!(
            IdempotencyKey::from_header(r#""a\"b\\c""#)
                .unwrap()
                .as_str(),
            r#"a"b\c"#
        );
    }

    #[test]
    fn a_quoted_value_must_be_an_sf_string() {
        for bad in [
            r#""abc"#,
            r#""a\bc""#,
            r#""abc"x"#,
            "\"caf\u{e9}\"",
            r#""a"b""#,
        ] {
            assert!(
                matches!(
                    IdempotencyKey::from_header(bad),
                    Err(KeyError::BadString(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(IdempotencyKey::from_header("\"\""), Err(KeyError::Empty));
        assert!(matches!(
            IdempotencyKey::from_header("\"a b\""),
            Err(KeyError::BadByte { byte: 0x20, .. })
        ));
    }
}
