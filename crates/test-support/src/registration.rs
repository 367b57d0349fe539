//! Users with their own kubeconfig, and Cluster API's and capms's webhooks registered on the
//! shared control plane.

use super::*;

impl ControlPlane {
    /// A kubeconfig for user `name` (no groups), with a client certificate from this control
    /// plane's CA: what RBAC tests run a component as.
    pub fn user_kubeconfig(&self, name: &str, dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).expect("dir");
        let pki = self.dir.join("pki");
        // A random serial, not -CAcreateserial: tests sign with this CA concurrently and a shared
        // ca.srl file races.
        let script = r#"set -e
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$3" -keyout "$2/$3.key" -out "$2/$3.csr" 2>/dev/null
openssl x509 -req -in "$2/$3.csr" -CA "$1/ca.crt" -CAkey "$1/ca.key" -days 30 -out "$2/$3.crt" \
  -set_serial "0x$(openssl rand -hex 16)" -extfile <(printf 'extendedKeyUsage=clientAuth') 2>/dev/null"#;
        let status = Command::new("bash")
            .args(["-c", script, "issue"])
            .arg(&pki)
            .arg(dir)
            .arg(name)
            .status()
            .expect("openssl");
        assert!(
            status.success(),
            "issuing a client certificate for {name} failed"
        );
        let admin = std::fs::read_to_string(&self.kubeconfig).expect("admin kubeconfig");
        let server = admin
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .expect("server")
            .to_owned();
        let b64 = |p: PathBuf| {
            let out = Command::new("base64")
                .arg("-w0")
                .arg(p)
                .output()
                .expect("base64");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: {name}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: {name}\n  context: {{cluster: local, user: {name}}}\ncurrent-context: {name}\n",
            b64(pki.join("ca.crt")),
            b64(dir.join(format!("{name}.crt"))),
            b64(dir.join(format!("{name}.key"))),
        );
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, kubeconfig).expect("write kubeconfig");
        path
    }
}

/// The shipped ClusterRole (`manifests/rbac/role.yaml`) under the name `name`, optionally
/// without its `/status` rules.
pub fn shipped_cluster_role(name: &str, with_status: bool) -> serde_json::Value {
    let text =
        std::fs::read_to_string(repo_root().join("manifests/rbac/role.yaml")).expect("role.yaml");
    let mut role: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
    role["metadata"]["name"] = serde_json::json!(name);
    if !with_status {
        let status_rule = |r: &serde_json::Value| {
            r["resources"].as_array().is_some_and(|rs| {
                rs.iter()
                    .any(|x| x.as_str().is_some_and(|x| x.ends_with("/status")))
            })
        };
        let rules = role["rules"].as_array_mut().expect("rules");
        rules.retain(|r| !status_rule(r));
    }
    role
}

/// A ClusterRoleBinding named `user` granting ClusterRole `role` to user `user`.
pub fn user_binding(user: &str, role: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    })
}

impl ControlPlane {
    /// A kubeconfig for user `name`, bound to the shipped ClusterRole (applied under the name
    /// `name`): capms with the rights it is installed with, and a user of its own.
    pub fn shipped_role_kubeconfig(&self, name: &str, dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).expect("dir");
        let binding = user_binding(name, name);
        for (file, doc) in [
            ("role", shipped_cluster_role(name, true)),
            ("binding", binding),
        ] {
            let path = dir.join(format!("{name}-{file}.json"));
            std::fs::write(&path, serde_json::to_vec(&doc).expect("json")).expect("write");
            self.apply(&path);
        }
        self.user_kubeconfig(name, dir)
    }
}

impl ControlPlane {
    /// Registers the admission webhooks of one of Cluster API's managers (`provider` names them)
    /// from its `manifests.yaml`, pointed at 127.0.0.1:`port`, scoped to `namespace`.
    pub fn register_webhooks_of(
        &self,
        provider: &str,
        manifests: &Path,
        port: u16,
        namespace: &str,
        work: &Path,
    ) {
        use base64::Engine;
        let text = std::fs::read_to_string(manifests).expect("webhook manifests");
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem());
        for (i, doc) in text
            .split("\n---")
            .filter(|d| d.contains("kind:"))
            .enumerate()
        {
            let mut config: serde_json::Value = serde_saphyr::from_str(doc).expect("webhook YAML");
            let name = config["metadata"]["name"]
                .as_str()
                .unwrap_or(provider)
                .to_owned();
            config["metadata"]["name"] =
                serde_json::json!(format!("{provider}-{name}-{namespace}"));
            for w in config["webhooks"].as_array_mut().into_iter().flatten() {
                let path = w["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                w["clientConfig"] = serde_json::json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca});
                w["namespaceSelector"] =
                    serde_json::json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
            }
            let file = work.join(format!("{provider}-webhooks-{i}.json"));
            std::fs::write(&file, serde_json::to_vec(&config).expect("json")).expect("write");
            self.apply(&file);
        }
    }
}

impl ControlPlane {
    /// Points the conversion of every CRD in `crds` (a directory of the CAPI cache) that serves
    /// more than one version at `/convert` on 127.0.0.1:`port`, the manager that owns them,
    /// trusting this control plane's CA: what Cluster API's kustomization does with a Service,
    /// for clients of an older API version (the stored one needs no conversion).
    pub fn convert_through(&self, crds: &Path, port: u16) {
        let ca = serde_json::to_value(k8s_openapi::ByteString(self.ca_pem())).expect("base64");
        for entry in std::fs::read_dir(binaries().capi.join(crds)).expect("CRD directory") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).expect("CRD");
            let crd: serde_json::Value = serde_saphyr::from_str(&text).expect("CRD YAML");
            let versions = crd["spec"]["versions"].as_array().map_or(0, Vec::len);
            let Some(name) = crd["metadata"]["name"].as_str().filter(|_| versions > 1) else {
                continue;
            };
            let conversion = serde_json::json!({"spec": {"conversion": {"strategy": "Webhook",
                "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
                    "url": format!("https://127.0.0.1:{port}/convert"), "caBundle": ca}}}}});
            self.kubectl(
                &[
                    "patch",
                    "crd",
                    name,
                    "--type=merge",
                    "-p",
                    &conversion.to_string(),
                ],
                &[],
            );
        }
    }

    /// Waits until every CRD installed so far is Established.
    pub fn wait_crds_established(&self) {
        self.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd",
                "--all",
            ],
            &[],
        );
    }

    /// Registers capms' webhook configurations pointed at 127.0.0.1:`port`, trusting this
    /// control plane's CA, scoped to `namespace` (and named after it, so tests do not collide).
    /// `manager_user` is the user capms runs as, when it has one of its own.
    pub fn register_capms_webhooks(
        &self,
        port: u16,
        namespace: &str,
        work: &Path,
        manager_user: Option<&str>,
    ) {
        let config = capms::webhooks::ClientConfig::Url {
            base: format!("https://127.0.0.1:{port}"),
            ca_bundle: self.ca_pem(),
        };
        for mut doc in capms::webhooks::webhook_configurations(&config, None, manager_user) {
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or("capms")
                .to_owned();
            doc["metadata"]["name"] = serde_json::json!(format!("{name}-{namespace}"));
            for w in doc["webhooks"].as_array_mut().into_iter().flatten() {
                w["namespaceSelector"] =
                    serde_json::json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
            }
            let file = work.join(format!(
                "capms-{}-{namespace}.json",
                doc["kind"].as_str().unwrap_or("webhooks")
            ));
            std::fs::write(&file, serde_json::to_vec(&doc).expect("json")).expect("write");
            self.apply(&file);
        }
    }
}
