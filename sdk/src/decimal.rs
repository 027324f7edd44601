//! Numbers as text, written by JS: below both the JS doors (`js`) and the error type
//! (`error`), which each need it.

/// `n` in decimal, as JS writes it: this spares the bundle Rust's integer formatting.
pub(crate) fn decimal(n: f64) -> String {
    js_sys::Number::from(n)
        .to_string_with_radix(10)
        .map(String::from)
        .unwrap_or_default()
}
