//! What a credentials Secret holds: metal-api's URL and an HMAC key or bearer token (v1), or
//! metal-apiserver's URL, a project token and its project (v2); a Secret of another shape is
//! refused naming the key that is wrong and what the Secret should hold.

use k8s_openapi::ByteString;
use metal_api::hmac::AuthType;
use metal_api::{Auth, Config};
use std::collections::BTreeMap;
use url::Url;

/// What a credentials Secret holds, for error messages.
const SHAPE: &str = "a credentials Secret holds `url`, and `hmac` (with `hmacAuthType`: \
                     Metal-View, Metal-Edit or Metal-Admin; default Metal-Edit) or `token`, \
                     and optionally `caBundle` (PEM); for metal-apiserver (`apiVersion`: v2; \
                     default v1) its `url`, a project `token` and that `project`";

/// The client configuration a credentials Secret's `data` describes; the error names the key
/// that is wrong and what the Secret should hold. `origin` names the Secret in metal-api's
/// refusals.
pub(crate) fn config_of(
    data: &BTreeMap<String, ByteString>,
    origin: &str,
) -> Result<Config, String> {
    let text = |key: &str| -> Result<Option<String>, String> {
        match data.get(key) {
            None => Ok(None),
            Some(bytes) => match std::str::from_utf8(&bytes.0) {
                Ok(t) if t.trim().is_empty() => Ok(None),
                Ok(t) => Ok(Some(t.trim().to_owned())),
                Err(_) => Err(format!("`{key}` is not UTF-8 text; {SHAPE}")),
            },
        }
    };
    let url = text("url")?.ok_or_else(|| format!("it holds no `url`; {SHAPE}"))?;
    let url = Url::parse(&url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| format!("`url` is not an http or https URL; {SHAPE}"))?;
    let (auth, v2_project) = match text("apiVersion")?.as_deref() {
        None | Some("v1") => {
            let auth = v1_auth(text("hmac")?, text("token")?, text("hmacAuthType")?)?;
            (auth, None)
        }
        Some("v2") => {
            let (token, project) = v2_auth(text("token")?, text("project")?)?;
            (token, Some(project))
        }
        Some(other) => {
            return Err(format!(
                "`apiVersion` {other:?} is not one of v1, v2; {SHAPE}"
            ));
        }
    };
    let mut config = Config::new(url, auth);
    config.v2_project = v2_project;
    config.ca_pem = data.get("caBundle").map(|b| b.0.clone());
    config.origin = Some(origin.to_owned());
    Ok(config)
}

/// metal-api's credentials: an HMAC key (Metal-Edit unless `hmacAuthType` says otherwise) or,
/// without one, a bearer token.
fn v1_auth(
    hmac: Option<String>,
    token: Option<String>,
    auth_type: Option<String>,
) -> Result<Auth, String> {
    match (hmac, token) {
        (Some(key), _) => {
            let auth_type = match auth_type {
                Some(t) => t
                    .parse::<AuthType>()
                    .map_err(|e| format!("`hmacAuthType`: {e}"))?,
                None => AuthType::Edit,
            };
            Ok(Auth::Hmac { key, auth_type })
        }
        (None, Some(token)) => Ok(Auth::Bearer(token)),
        (None, None) => Err(format!("it holds neither `hmac` nor `token`; {SHAPE}")),
    }
}

/// metal-apiserver's credentials (API v2): a project token and its project. v1's `hmac` and
/// `hmacAuthType` are left unread: a Secret moved from v1 by `kubectl apply` keeps the keys its
/// new manifest leaves out.
fn v2_auth(token: Option<String>, project: Option<String>) -> Result<(Auth, String), String> {
    let token = token.ok_or_else(|| format!("it holds no `token`; {SHAPE}"))?;
    let project = project
        .filter(|p| p.len() == 36 && p.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
        .ok_or_else(|| format!("`project` is not a project's UUID; {SHAPE}"))?;
    Ok((Auth::Bearer(token), project))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        match config_of(&data(pairs), "Secret ns/creds") {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn an_hmac_secret_defaults_to_metal_edit_and_names_its_origin() {
        let c = config_of(
            &data(&[("url", "http://127.0.0.1:8080/metal\n"), ("hmac", "k")]),
            "Secret ns/creds",
        )
        .expect("accepted");
        assert_eq!(c.url.as_str(), "http://127.0.0.1:8080/metal");
        assert!(matches!(c.auth, Auth::Hmac { ref key, auth_type: AuthType::Edit } if key == "k"));
        assert_eq!(c.origin.as_deref(), Some("Secret ns/creds"));
    }

    #[test]
    fn a_token_secret_authenticates_by_bearer_and_hmac_wins_when_both_are_given() {
        let token =
            config_of(&data(&[("url", "https://a/"), ("token", "t")]), "s").expect("accepted");
        assert!(matches!(token.auth, Auth::Bearer(ref t) if t == "t"));
        let both = [
            ("url", "https://a/"),
            ("token", "t"),
            ("hmac", "k"),
            ("hmacAuthType", "Metal-Admin"),
        ];
        let both = config_of(&data(&both), "s").expect("accepted");
        assert!(matches!(
            both.auth,
            Auth::Hmac {
                auth_type: AuthType::Admin,
                ..
            }
        ));
    }

    #[test]
    fn each_wrong_shape_names_the_key_and_what_the_secret_should_hold() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (&[("hmac", "k")], "holds no `url`"),
            (
                &[("url", "ftp://a"), ("hmac", "k")],
                "`url` is not an http or https URL",
            ),
            (&[("url", "http://a")], "neither `hmac` nor `token`"),
            (
                &[("url", "http://a"), ("hmac", " ")],
                "neither `hmac` nor `token`",
            ),
            (
                &[("url", "http://a"), ("hmac", "k"), ("hmacAuthType", "edit")],
                "Metal-View, Metal-Edit, Metal-Admin",
            ),
        ];
        for (pairs, expected) in cases {
            let e = error(pairs);
            assert!(e.contains(expected), "{pairs:?}: {e}");
            assert!(e.contains("Metal-Edit"), "{pairs:?} names no choices: {e}");
        }
        let mut binary = data(&[("url", "http://a")]);
        binary.insert("hmac".into(), ByteString(vec![0xff, 0xfe]));
        let e = config_of(&binary, "s").expect_err("refused");
        assert!(e.contains("`hmac` is not UTF-8"), "{e}");
    }

    #[test]
    fn a_v2_secret_calls_metal_apiserver_with_its_token_in_its_project() {
        let project = "00000000-0000-0000-0000-000000000001";
        let v2 = [
            ("url", "https://api.example/"),
            ("token", "a.b.c"),
            ("project", project),
            ("apiVersion", "v2"),
        ];
        let c = config_of(&data(&v2), "s").expect("accepted");
        assert_eq!(c.v2_project.as_deref(), Some(project));
        assert!(matches!(c.auth, Auth::Bearer(ref t) if t == "a.b.c"));
        let v1 = config_of(&data(&[("url", "https://a/"), ("token", "t")]), "s");
        assert_eq!(v1.expect("accepted").v2_project, None);
        let leftover = [
            ("url", "https://api.example/"),
            ("token", "a.b.c"),
            ("project", project),
            ("apiVersion", "v2"),
            ("hmac", "k"),
        ];
        let moved = config_of(&data(&leftover), "s").expect("v1's key left unread");
        assert!(matches!(moved.auth, Auth::Bearer(_)));
        let cases: [(&[(&str, &str)], &str); 3] = [
            (
                &[
                    ("url", "http://a"),
                    ("project", project),
                    ("apiVersion", "v2"),
                ],
                "holds no `token`",
            ),
            (
                &[("url", "http://a"), ("token", "t"), ("apiVersion", "v2")],
                "`project` is not",
            ),
            (
                &[("url", "http://a"), ("token", "t"), ("apiVersion", "2")],
                "not one of v1, v2",
            ),
        ];
        for (pairs, expected) in cases {
            let e = error(pairs);
            assert!(e.contains(expected), "{pairs:?}: {e}");
            assert!(
                e.contains("`apiVersion`: v2"),
                "{pairs:?} names no choices: {e}"
            );
        }
    }

    #[test]
    fn no_error_carries_what_the_secret_holds() {
        let e = error(&[("url", "ftp://host.example"), ("hmac", "super-secret")]);
        assert!(
            !e.contains("super-secret") && !e.contains("host.example"),
            "{e}"
        );
    }
}
