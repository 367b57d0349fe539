//! A project token: the JWT metal-apiserver issued, kept for its bearer header and read for
//! when it was issued and when it expires (the client cannot check its signature; the server
//! does). Its text is never printed.

use base64::Engine;
use jiff::{SignedDuration, Timestamp};

/// A token, with the times its claims state.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    secret: String,
    issued_at: Timestamp,
    expires: Timestamp,
}

/// Why a text is not a token capms can use.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("the token is not a JWT (three dot-separated parts)")]
    NotAJwt,
    #[error("the token's claims cannot be read: {0}")]
    Claims(String),
}

#[derive(serde::Deserialize)]
struct Claims {
    iat: i64,
    exp: i64,
}

impl Token {
    /// Reads `secret`, a JWT, for its `iat` and `exp` claims.
    pub fn parse(secret: &str) -> Result<Token, TokenError> {
        let secret = secret.trim();
        let mut parts = secret.split('.');
        let (Some(_), Some(payload), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::NotAJwt);
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .map_err(|e| TokenError::Claims(e.to_string()))?;
        let claims: Claims =
            serde_json::from_slice(&bytes).map_err(|e| TokenError::Claims(e.to_string()))?;
        let at = |seconds: i64| {
            Timestamp::from_second(seconds).map_err(|e| TokenError::Claims(e.to_string()))
        };
        Ok(Token {
            secret: secret.to_owned(),
            issued_at: at(claims.iat)?,
            expires: at(claims.exp)?,
        })
    }

    pub fn expires(&self) -> Timestamp {
        self.expires
    }

    pub fn expired(&self, now: Timestamp) -> bool {
        now >= self.expires
    }

    /// Is it time to refresh it: half its lifetime or less left at `now`? Half, not the last
    /// quarter: a refresh refused while the token is over its rate limit (a minute at most) or
    /// while metal-apiserver is away has the second half to succeed in; an expired token can
    /// only be replaced by hand.
    pub fn refresh_due(&self, now: Timestamp) -> bool {
        let lifetime = self.expires.duration_since(self.issued_at);
        let left = self.expires.duration_since(now);
        left <= lifetime / 2 || lifetime <= SignedDuration::ZERO
    }

    pub(crate) fn bearer(&self) -> &str {
        &self.secret
    }

    /// The JWT's text, to write back where it came from (a Secret).
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("issued_at", &self.issued_at)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(iat: i64, exp: i64) -> String {
        let enc = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let header = enc(serde_json::json!({"alg": "HS256", "typ": "JWT"}));
        let claims = enc(serde_json::json!({"iat": iat, "exp": exp, "sub": "capms"}));
        format!("{header}.{claims}.signature")
    }

    #[test]
    fn a_token_is_due_for_refresh_once_half_its_lifetime_is_gone() {
        let token = Token::parse(&jwt(1_000, 1_400)).unwrap_or_else(|e| panic!("{e}"));
        let at = |s: i64| Timestamp::from_second(s).unwrap_or_else(|e| panic!("{e}"));
        assert!(!token.refresh_due(at(1_000)));
        assert!(!token.refresh_due(at(1_199)), "more than half left");
        assert!(token.refresh_due(at(1_200)), "half left");
        assert!(token.refresh_due(at(1_301)), "less than a quarter left");
        assert!(!token.expired(at(1_399)));
        assert!(token.expired(at(1_400)));
    }

    #[test]
    fn a_token_that_is_no_jwt_is_refused_and_none_is_ever_printed() {
        assert_eq!(Token::parse("abc"), Err(TokenError::NotAJwt));
        assert!(matches!(Token::parse("a.b.c"), Err(TokenError::Claims(_))));
        let secret = jwt(1_000, 1_400);
        let token = Token::parse(&secret).unwrap_or_else(|e| panic!("{e}"));
        assert!(!format!("{token:?}").contains(&secret));
    }
}
