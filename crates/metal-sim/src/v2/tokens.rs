//! The API tokens the simulator issues, as metal-apiserver keeps them: a JWT naming the token
//! (`jti`) and its user (`sub`), checked for its signature and expiry, and then looked up in the
//! store, so that a revoked token is refused though its JWT is still valid. What a token may do
//! (roles per project, method permissions) lives in the store, not in the JWT.
//!
//! Departure: metal-apiserver signs with ES512; the simulator signs with HMAC-SHA256 (`HS256`),
//! since clients never verify the signature.

use super::connect::{Code, ConnectError};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::{SignedDuration, Timestamp};
use rand::RngCore;
use ring::hmac;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// The issuer and audience the simulator's tokens name.
const ISSUER: &str = "metal-sim";

/// A project role, as the protos spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ProjectRole {
    #[serde(rename = "PROJECT_ROLE_OWNER")]
    Owner,
    #[serde(rename = "PROJECT_ROLE_EDITOR")]
    Editor,
    #[serde(rename = "PROJECT_ROLE_VIEWER")]
    Viewer,
}

/// Methods allowed on a subject (a project, or "" for methods without one, or "*" for any).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MethodPermission {
    pub subject: String,
    #[serde(default)]
    pub methods: Vec<String>,
}

/// A stored API token.
#[derive(Clone, Debug)]
pub struct Token {
    pub uuid: String,
    pub user: String,
    pub description: String,
    pub project_roles: BTreeMap<String, ProjectRole>,
    pub permissions: Vec<MethodPermission>,
    pub issued_at: Timestamp,
    pub expires: Timestamp,
}

impl Token {
    /// The `metalstack.api.v2.Token` message.
    pub fn message(&self) -> serde_json::Value {
        serde_json::json!({
            "uuid": self.uuid,
            "user": self.user,
            "description": self.description,
            "permissions": self.permissions,
            "expires": self.expires.to_string(),
            "issuedAt": self.issued_at.to_string(),
            "tokenType": "TOKEN_TYPE_API",
            "projectRoles": self.project_roles,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct Claims {
    iss: String,
    aud: String,
    sub: String,
    jti: String,
    iat: i64,
    nbf: i64,
    exp: i64,
    #[serde(rename = "type")]
    token_type: String,
}

/// The tokens issued and not revoked, and the key their JWTs are signed with.
pub struct Tokens {
    key: hmac::Key,
    stored: HashMap<String, Token>,
}

impl Default for Tokens {
    fn default() -> Self {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        Tokens {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
            stored: HashMap::new(),
        }
    }
}

impl Tokens {
    /// Stores `token` and gives its JWT.
    pub fn issue(&mut self, token: Token) -> String {
        let claims = Claims {
            iss: ISSUER.into(),
            aud: ISSUER.into(),
            sub: token.user.clone(),
            jti: token.uuid.clone(),
            iat: token.issued_at.as_second(),
            nbf: token.issued_at.as_second(),
            exp: token.expires.as_second(),
            token_type: "TOKEN_TYPE_API".into(),
        };
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let claims = serde_json::to_vec(&claims).unwrap_or_default();
        let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims));
        let signature = hmac::sign(&self.key, signed.as_bytes());
        self.stored.insert(token.uuid.clone(), token);
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// A new token of `user` with `roles` and `permissions`, valid for `lifetime` from `now`.
    pub fn mint(
        &mut self,
        user: &str,
        roles: BTreeMap<String, ProjectRole>,
        permissions: Vec<MethodPermission>,
        lifetime: SignedDuration,
        now: Timestamp,
    ) -> (Token, String) {
        let token = Token {
            uuid: uuid::Uuid::new_v4().to_string(),
            user: user.to_owned(),
            description: String::new(),
            project_roles: roles,
            permissions,
            issued_at: now,
            expires: now.saturating_add(lifetime).unwrap_or(now),
        };
        let jwt = self.issue(token.clone());
        (token, jwt)
    }

    /// Removes the token `uuid` of `user`; false when there is none.
    pub fn revoke(&mut self, uuid: &str, user: Option<&str>) -> bool {
        let owned = self
            .stored
            .get(uuid)
            .is_some_and(|t| user.is_none_or(|u| t.user == u));
        owned && self.stored.remove(uuid).is_some()
    }

    /// The token an `authorization` header carries, as metal-apiserver checks it at `now`: None
    /// without one; refused when it is malformed, not signed by the simulator, expired or
    /// revoked.
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<Token>, ConnectError> {
        let jwt = authorization
            .and_then(|h| h.split_once(' '))
            .map(|(_, jwt)| jwt.trim())
            .unwrap_or_default();
        if jwt.is_empty() {
            return Ok(None);
        }
        let refused = |message: &str| ConnectError::new(Code::Unauthenticated, message);
        let parts: Vec<&str> = jwt.split('.').collect();
        let [header, claims, signature] = parts[..] else {
            return Err(refused(
                "token is malformed: token contains an invalid number of segments",
            ));
        };
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| refused("token is malformed: could not base64 decode signature"))?;
        let signed = format!("{header}.{claims}");
        if hmac::verify(&self.key, signed.as_bytes(), &signature).is_err() {
            return Err(refused(
                "token is not valid, no suitable publickey to validate signature found",
            ));
        }
        let claims: Claims = URL_SAFE_NO_PAD
            .decode(claims)
            .ok()
            .and_then(|c| serde_json::from_slice(&c).ok())
            .ok_or_else(|| refused("token is malformed: could not JSON decode claim"))?;
        if claims.exp <= now.as_second() {
            return Err(refused("token has invalid claims: token is expired"));
        }
        match self.stored.get(&claims.jti) {
            Some(token) => Ok(Some(token.clone())),
            None => Err(refused("token was revoked")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

    fn minted(tokens: &mut Tokens, seconds: i64, now: Timestamp) -> (Token, String) {
        let roles = [(PROJECT.to_owned(), ProjectRole::Editor)].into();
        let lifetime = SignedDuration::from_secs(seconds);
        tokens.mint("tester", roles, Vec::new(), lifetime, now)
    }

    #[test]
    fn a_token_is_known_until_it_expires_or_is_revoked() {
        let mut tokens = Tokens::default();
        let now = Timestamp::now();
        let (token, jwt) = minted(&mut tokens, 600, now);
        let header = format!("Bearer {jwt}");
        let found = tokens.authenticate(Some(&header), now).expect("valid");
        assert_eq!(found.map(|t| t.uuid), Some(token.uuid.clone()));
        let later = now
            .saturating_add(SignedDuration::from_secs(600))
            .expect("time");
        let expired = tokens
            .authenticate(Some(&header), later)
            .expect_err("expired");
        assert_eq!(
            expired.message,
            "token has invalid claims: token is expired"
        );
        assert!(!tokens.revoke(&token.uuid, Some("someone else")));
        assert!(tokens.revoke(&token.uuid, Some("tester")));
        let revoked = tokens
            .authenticate(Some(&header), now)
            .expect_err("revoked");
        assert_eq!(
            (revoked.code, revoked.message.as_str()),
            (Code::Unauthenticated, "token was revoked")
        );
    }

    #[test]
    fn a_foreign_or_malformed_token_is_unauthenticated_and_none_is_anonymous() {
        let mut ours = Tokens::default();
        let mut theirs = Tokens::default();
        let now = Timestamp::now();
        let (_, foreign) = minted(&mut theirs, 600, now);
        let _ = minted(&mut ours, 600, now);
        let e = ours
            .authenticate(Some(&format!("Bearer {foreign}")), now)
            .expect_err("foreign");
        assert_eq!(
            e.message,
            "token is not valid, no suitable publickey to validate signature found"
        );
        let e = ours
            .authenticate(Some("Bearer abc"), now)
            .expect_err("malformed");
        assert!(e.message.contains("invalid number of segments"), "{e:?}");
        assert!(matches!(ours.authenticate(None, now), Ok(None)));
        assert!(matches!(ours.authenticate(Some("Bearer "), now), Ok(None)));
    }
}
