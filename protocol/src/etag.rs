//! Entity-tag lists as RFC 9110 §8.8.3 and §13.1 write them, for `If-Match` and
//! `If-None-Match`.
//!
//! `If-Match` uses the strong comparison (a weak tag never matches); `If-None-Match`
//! uses the weak one (`W/"7"` matches `"7"`). `*` matches any current representation.
//! A header that does not parse matches nothing.

/// One entity-tag: its opaque part, quotes included, and whether it was weak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntityTag {
    /// `W/` was given.
    pub weak: bool,
    /// `"…"`, quotes included.
    pub opaque: String,
}

/// A parsed `If-Match` or `If-None-Match` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// `*`: any current representation.
    Any,
    /// A list of tags (empty when the header did not parse).
    Tags(Vec<EntityTag>),
}

impl Condition {
    /// Parses a header value; a malformed one becomes an empty list, which matches nothing.
    pub fn parse(header: &str) -> Condition {
        if header.trim() == "*" {
            return Condition::Any;
        }
        Condition::Tags(parse_list(header).unwrap_or_default())
    }

    /// `If-Match`: strong comparison against `current` (an opaque tag, quotes included).
    pub fn matches_strong(&self, current: &str) -> bool {
        match self {
            Condition::Any => true,
            Condition::Tags(tags) => tags.iter().any(|t| !t.weak && t.opaque == current),
        }
    }

    /// `If-None-Match`: weak comparison against `current`.
    pub fn matches_weak(&self, current: &str) -> bool {
        match self {
            Condition::Any => true,
            Condition::Tags(tags) => tags.iter().any(|t| t.opaque == current),
        }
    }

    /// The opaque tags a strong comparison could match (`None` for `*`): what a guard
    /// in SQL compares the current tag with.
    pub fn strong_tags(&self) -> Option<Vec<&str>> {
        match self {
            Condition::Any => None,
            Condition::Tags(tags) => Some(
                tags.iter()
                    .filter(|t| !t.weak)
                    .map(|t| t.opaque.as_str())
                    .collect(),
            ),
        }
    }
}

/// `#entity-tag`: a comma-separated list, empty elements allowed.
fn parse_list(header: &str) -> Option<Vec<EntityTag>> {
    let mut tags = Vec::new();
    let mut rest = header;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return Some(tags);
        }
        let (weak, after) = match rest.strip_prefix("W/") {
            Some(after) => (true, after),
            None => (false, rest),
        };
        let inner = after.strip_prefix('"')?;
        let end = inner.find('"')?;
        let opaque = &inner[..end];
        // etagc = %x21 / %x23-7E / obs-text
        if !opaque
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
        {
            return None;
        }
        tags.push(EntityTag {
            weak,
            opaque: format!("\"{opaque}\""),
        });
        rest = inner[end + 1..].trim_start_matches([' ', '\t']);
        if !(rest.is_empty() || rest.starts_with(',')) {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_matches_anything() {
        assert!(Condition::parse("*").matches_strong("\"9\""));
        assert!(Condition::parse(" * ").matches_weak("\"9\""));
        assert_eq!(Condition::parse("*").strong_tags(), None);
    }

    #[test]
    fn lists_are_parsed_and_weak_tags_never_match_strongly() {
        let c = Condition::parse(r#""1", W/"2" ,"3,4""#);
        assert!(c.matches_strong("\"1\""));
        assert!(!c.matches_strong("\"2\""), "If-Match compares strongly");
        assert!(c.matches_weak("\"2\""), "If-None-Match compares weakly");
        assert!(
            c.matches_strong("\"3,4\""),
            "a comma inside quotes is part of the tag"
        );
        assert_eq!(c.strong_tags(), Some(vec!["\"1\"", "\"3,4\""]));
        assert!(Condition::parse(r#",, "5",,"#).matches_strong("\"5\""));
    }

    #[test]
    fn a_malformed_header_matches_nothing() {
        for bad in ["5", "\"5", "\"5\" x", "W/5", "\"a b\"", ""] {
            let c = Condition::parse(bad);
            assert!(!c.matches_strong("\"5\""), "{bad:?}");
            assert!(!c.matches_weak("\"5\""), "{bad:?}");
        }
    }
}
