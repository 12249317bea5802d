//! Secrets that must never be shown: a password kept in a [`Secret`] prints as `***`, and
//! [`redact_password`] masks the password of a URL as written (for error lines about a URL
//! that did not parse). Any stage may use these; `capture::spec` keeps its own fuller
//! redaction of stream URLs (query parameters too).

use std::fmt;

/// A password (or any secret string): `Debug` and `Display` print `***`, so a config that
/// holds one can be logged or debug-printed whole. [`Secret::expose`] is the one way to the
/// text, for the protocol that needs it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Keeps `s` as a secret.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    /// The secret itself: hand it to the protocol, never to a log line.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `url` with the password of its user information (RFC 3986 §3.2.1,
/// `scheme://user:password@host...`) replaced by `***`; anything else is returned as it
/// is. Works on text that is not a valid URL too (the last `@` before the first `/` after
/// `://` ends the user information), so an error about a bad URL can quote it safely.
pub fn redact_password(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else { return url.to_string() };
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return url.to_string() };
    match rest[..at].find(':') {
        Some(colon) => format!("{}{}:***{}", &url[..start], &rest[..colon], &rest[at..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_and_nothing_else() {
        assert_eq!(redact_password("mqtt://alice:s3cr3t@broker:1883"), "mqtt://alice:***@broker:1883");
        assert_eq!(
            redact_password("mqtts://a:p@ss:w@rd@h/x"),
            "mqtts://a:***@h/x",
            "the last @ of the authority ends the user information"
        );
        assert_eq!(redact_password("mqtt://alice@broker"), "mqtt://alice@broker");
        assert_eq!(
            redact_password("mqtt://broker:1883/a@b"),
            "mqtt://broker:1883/a@b",
            "an @ in the path is not user information"
        );
        assert_eq!(redact_password("not a url"), "not a url");
        let s = Secret::new("hunter2");
        assert_eq!((format!("{s}"), format!("{s:?}"), s.expose()), ("***".into(), "***".into(), "hunter2"));
    }
}
