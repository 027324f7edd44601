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

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
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
}
