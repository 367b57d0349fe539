//! The metal-api simulator inside a test's runtime.

use metalstack_api::types::token::TokenServiceCreateRequest;
use std::time::Duration;

/// The project of the lab inventory's machines and of the tokens tests mint for it.
pub const LAB_PROJECT: &str = "00000000-0000-0000-0000-000000000001";

/// A metal-api simulator running inside the test's runtime on a free loopback port.
pub struct RunningSim {
    pub sim: metal_sim::Sim,
    pub url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl RunningSim {
    pub async fn start(inventory: metal_sim::inventory::Inventory, base_path: &str) -> RunningSim {
        Self::start_with(inventory, base_path, metal_sim::Timings::fast()).await
    }

    /// A simulator whose machine lifecycle takes `timings`.
    pub async fn start_with(
        inventory: metal_sim::inventory::Inventory,
        base_path: &str,
        timings: metal_sim::Timings,
    ) -> RunningSim {
        let config = metal_sim::SimConfig {
            base_path: base_path.to_owned(),
            keys: metal_sim::HmacKeys::lab(),
            timings,
            rate_limit: metal_sim::DEFAULT_RATE_LIMIT,
        };
        Self::start_configured(inventory, config).await
    }

    /// A simulator of `config` (a lower rate limit for API v2, say).
    pub async fn start_configured(
        inventory: metal_sim::inventory::Inventory,
        config: metal_sim::SimConfig,
    ) -> RunningSim {
        capms::tls::install_default_provider();
        let base_path = config.base_path.clone();
        let sim = metal_sim::Sim::new(&inventory, config).expect("inventory is valid");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(metal_sim::serve(listener, sim.clone(), async move {
            let _ = rx.await;
        }));
        let url = format!("http://{addr}{}", base_path.trim_end_matches('/'));
        RunningSim {
            sim,
            url,
            shutdown: Some(tx),
        }
    }

    /// A client authenticated with the lab key of `auth_type`.
    pub fn client(&self, auth_type: metal_api::hmac::AuthType) -> metal_api::Client {
        let key = metal_sim::HmacKeys::lab().keys[&auth_type].clone();
        self.client_with_key(auth_type, &key)
    }

    /// A client signing as `auth_type` with `key` (a wrong or a rotated one).
    pub fn client_with_key(
        &self,
        auth_type: metal_api::hmac::AuthType,
        key: &str,
    ) -> metal_api::Client {
        let key = key.to_owned();
        let auth = metal_api::Auth::Hmac { key, auth_type };
        let mut config = metal_api::Config::new(url::Url::parse(&self.url).expect("url"), auth);
        config.timeout = Duration::from_secs(5);
        metal_api::Client::new(config).expect("client")
    }

    /// A project token as an operator gives capms: editor of `project`, listing the methods of
    /// visibility SELF capms calls, living `expires` (`"120s"`; 8 h when None): its
    /// `{token, secret}`.
    pub async fn mint_capms_token(
        &self,
        project: &str,
        expires: Option<&str>,
    ) -> serde_json::Value {
        let request = TokenServiceCreateRequest::for_capms(project, 8 * 3600);
        let mut request = serde_json::to_value(request).expect("a token request");
        if let Some(expires) = expires {
            request["expires"] = expires.into();
        }
        self.mint_v2(request).await
    }

    /// A token minted through the simulator's `/sim/v2/tokens` with `request` (a
    /// `TokenServiceCreateRequest`): its `{token, secret}`.
    pub async fn mint_v2(&self, request: serde_json::Value) -> serde_json::Value {
        let base = self.url.trim_end_matches("/metal");
        let answer = reqwest::Client::new()
            .post(format!("{base}/sim/v2/tokens"))
            .json(&request)
            .send()
            .await
            .expect("mint a v2 token");
        answer.json().await.expect("a minted token")
    }

    /// Revokes the token of `uuid` through the simulator's `/sim/v2/tokens`, as an admin would.
    pub async fn revoke_v2(&self, uuid: &str) {
        let base = self.url.trim_end_matches("/metal");
        let answer = reqwest::Client::new()
            .delete(format!("{base}/sim/v2/tokens/{uuid}"))
            .send()
            .await
            .expect("revoke a v2 token");
        assert!(
            answer.status().is_success(),
            "revoking: {}",
            answer.status()
        );
    }

    /// The root metal-apiserver's API v2 is served at.
    pub fn v2_url(&self) -> String {
        self.url.trim_end_matches("/metal").to_owned()
    }

    /// What a credentials Secret holds (its `stringData`) for this simulator's API v2 and
    /// `token`, a token of `project`.
    pub fn v2_credentials(&self, token: &str, project: &str) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v2", "url": self.v2_url(), "token": token,
                           "project": project})
    }

    pub fn editor(&self) -> metal_api::Client {
        self.client(metal_api::hmac::AuthType::Edit)
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
