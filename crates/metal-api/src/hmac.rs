//! metal-api's HMAC request signing: `hex(HMAC-SHA256(key, X-Date ‖ METHOD ‖ X-Data-Salt))`.
//! Path, query and body are not signed.

use rand::Rng;
use ring::hmac;

/// The `Authorization` scheme words metal-api knows, one per HMAC identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr)]
#[strum(prefix = "Metal-")]
pub enum AuthType {
    View,
    Edit,
    Admin,
}

impl AuthType {
    pub const ALL: [AuthType; 3] = [AuthType::View, AuthType::Edit, AuthType::Admin];

    /// `Metal-View`, `Metal-Edit` or `Metal-Admin`.
    pub fn scheme(self) -> &'static str {
        self.into()
    }

    pub fn from_scheme(scheme: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.scheme() == scheme)
    }
}

impl std::str::FromStr for AuthType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_scheme(s).ok_or_else(|| {
            format!("unknown HMAC auth type {s:?}; valid: Metal-View, Metal-Edit, Metal-Admin")
        })
    }
}

/// The signature metal-api expects for one request.
pub fn signature(key: &[u8], x_date: &str, method: &str, salt: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(x_date.as_bytes());
    ctx.update(method.as_bytes());
    ctx.update(salt.as_bytes());
    hex(ctx.sign().as_ref())
}

/// Constant-time check of a signature a client sent.
pub fn verify(key: &[u8], x_date: &str, method: &str, salt: &str, given_hex: &str) -> bool {
    let Some(tag) = unhex(given_hex) else {
        return false;
    };
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let message = [x_date.as_bytes(), method.as_bytes(), salt.as_bytes()].concat();
    hmac::verify(&key, &message, &tag).is_ok()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `X-Date` as metal-api hashes it: UTC, RFC 3339, whole seconds.
pub fn x_date(now: jiff::Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// 24 random ASCII letters, as the Go clients send.
pub fn salt() -> String {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut rng = rand::rng();
    (0..24)
        .map(|_| LETTERS[rng.random_range(0..LETTERS.len())] as char)
        .collect()
}

/// The headers of a request signed now with `key` as `auth_type`: `X-Date`, `X-Data-Salt` and
/// `Authorization`.
pub fn signed_headers(
    key: &[u8],
    auth_type: AuthType,
    method: &str,
) -> [(&'static str, String); 3] {
    let date = x_date(jiff::Timestamp::now());
    let salt = salt();
    let sig = signature(key, &date, method, &salt);
    [
        ("X-Date", date),
        ("X-Data-Salt", salt),
        ("Authorization", format!("{} {sig}", auth_type.scheme())),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vectors() {
        assert_eq!(
            signature(
                b"metal-edit",
                "2024-01-02T03:04:05Z",
                "GET",
                "abcdefghijklmnopqrstuvwx"
            ),
            "79c06c6f0d336b73a317db2f1e044b9223824fc379d31df1721ae1fa1fabf28a"
        );
        assert_eq!(
            signature(
                b"metal-admin",
                "2024-01-02T03:04:05Z",
                "POST",
                "ABCDEFGHIJKLMNOPQRSTUVWX"
            ),
            "eff35a8ca0bea970ae348cce87f23a0a83108a9da3ec5a4d6b1557be1bba639d"
        );
        assert!(verify(
            b"metal-edit",
            "2024-01-02T03:04:05Z",
            "GET",
            "abcdefghijklmnopqrstuvwx",
            "79c06c6f0d336b73a317db2f1e044b9223824fc379d31df1721ae1fa1fabf28a"
        ));
        assert!(!verify(
            b"metal-edit",
            "2024-01-02T03:04:05Z",
            "POST",
            "abcdefghijklmnopqrstuvwx",
            "79c0"
        ));
    }

    #[test]
    fn date_and_salt_have_the_canonical_shape() {
        let ts: jiff::Timestamp = "2024-01-02T03:04:05.999Z".parse().expect("timestamp");
        assert_eq!(x_date(ts), "2024-01-02T03:04:05Z");
        let s = salt();
        assert_eq!(s.len(), 24);
        assert!(s.chars().all(|c| c.is_ascii_alphabetic()));
    }

    #[test]
    fn auth_types_round_trip() {
        for a in AuthType::ALL {
            assert_eq!(a.scheme().parse::<AuthType>(), Ok(a));
        }
        assert!(
            "metal-edit".parse::<AuthType>().is_err(),
            "schemes are case-sensitive"
        );
    }
}
