//! The reconcile loops end to end: the real kube-apiserver and Cluster API core manager, the
//! `capms manager` binary, and the metal-api simulator with seed 000's inventory.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;

use capms::api::{MetalStackCluster, MetalStackFirewall, MetalStackMachine};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use metal_api::types::*;
use metal_sim::inventory::Inventory;
use serde_json::{Value, json};
use std::time::Duration;
use support::{
    ChildProcess, ConflictingWrites, ControlPlane, ManagerOn, RunningSim, TestNamespace,
    eventually, eventually_seen, free_port, repo_root, shipped_cluster_role, spawn_core_manager,
};

const MSC: &str = "metal-stack-cluster";
const MSM: &str = "metal-stack-machine";
const FIREWALL_MACHINE: &str = "2294c949-88f6-5390-8154-fa53d93a3313";
const WORKER_MACHINE: &str = "e0ab02d2-27cd-5a5e-8efc-080ba80cf258";

/// Everything one test needs, torn down on drop (processes killed, namespace deleted).
struct Env {
    /// Who capms runs as; the admin kubeconfig when None.
    kubeconfig: Option<std::path::PathBuf>,
    ns: TestNamespace,
    sim: RunningSim,
    _capi: ChildProcess,
    capms: Option<ChildProcess>,
    /// The metrics port of the capms `capms` holds.
    metrics_port: Option<u16>,
    /// capms watches every namespace, not only the test's.
    every_namespace: bool,
    /// The credentials Secret each cluster applied with [`Env::apply_seed_cluster`] names when
    /// it names none (see [`Env::use_api_v2`]).
    credentials: Option<&'static str>,
    work: tempfile::TempDir,
}

/// The project of the lab's clusters.
use support::LAB_PROJECT;

/// The credentials Secret of API v2 made by [`Env::use_api_v2`].
const V2_SECRET: &str = "metal-v2";

/// A project token minted for capms.
struct V2Token {
    uuid: String,
    secret: String,
    expires: jiff::Timestamp,
}

impl Env {
    async fn start(prefix: &str) -> Env {
        let mut env = Self::without_capms(prefix).await;
        env.start_capms(&[]);
        env
    }

    async fn without_capms(prefix: &str) -> Env {
        Self::with_inventory(prefix, Inventory::seed000()).await
    }

    async fn with_inventory(prefix: &str, inventory: Inventory) -> Env {
        let mut env = Self::on(ControlPlane::shared(), prefix, inventory).await;
        env.kubeconfig = None;
        env
    }

    /// An environment on control plane `cp`, capms running as its admin.
    async fn on(cp: &ControlPlane, prefix: &str, inventory: Inventory) -> Env {
        let ns = cp.namespace(prefix).await;
        let sim = RunningSim::start(inventory, "/metal").await;
        let work = tempfile::tempdir().expect("temp dir");
        let capi = spawn_core_manager(&ManagerOn {
            cp,
            namespace: &ns.name,
            work: work.path(),
        });
        Env {
            kubeconfig: Some(cp.kubeconfig.clone()),
            ns,
            sim,
            _capi: capi,
            capms: None,
            metrics_port: None,
            every_namespace: false,
            credentials: None,
            work,
        }
    }

    fn capms_args(&self, extra: &[&str], metrics_port: u16) -> Vec<String> {
        let cp = ControlPlane::shared();
        let kubeconfig = self
            .kubeconfig
            .clone()
            .unwrap_or_else(|| cp.kubeconfig.clone());
        let mut args = vec![
            "manager".to_owned(),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--health-addr=127.0.0.1:{}", free_port()),
            format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            // These tests count reconciles on /metrics over plain HTTP.
            "--metrics-secure=false".into(),
            format!("--leader-election-namespace={}", self.ns.name),
        ];
        if !self.every_namespace {
            args.push(format!("--namespace={}", self.ns.name));
        }
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    }

    fn spawn_capms(&self, name: &str, extra: &[&str], metrics_port: u16) -> ChildProcess {
        self.spawn_capms_with_env(name, extra, metrics_port, &[])
    }

    /// capms with `env` added to its environment.
    fn spawn_capms_with_env(
        &self,
        name: &str,
        extra: &[&str],
        metrics_port: u16,
        env: &[(&str, &str)],
    ) -> ChildProcess {
        let mut all = vec![
            ("METAL_API_URL", self.sim.url.as_str()),
            ("METAL_API_HMAC", "metal-edit"),
            ("METAL_API_HMAC_AUTH_TYPE", "Metal-Edit"),
            ("RUST_LOG", "info,capms=debug"),
        ];
        all.extend_from_slice(env);
        ChildProcess::spawn(
            name,
            &support::workspace_binary("capms"),
            &self.capms_args(extra, metrics_port),
            &all,
            self.work.path(),
        )
    }

    fn start_capms(&mut self, extra: &[&str]) {
        let port = free_port();
        self.capms = Some(self.spawn_capms("capms", extra, port));
        self.metrics_port = Some(port);
    }

    fn capms_log(&self) -> String {
        self.capms
            .as_ref()
            .map(|c| c.log_tail())
            .unwrap_or_default()
    }

    fn capi_log(&self) -> String {
        self._capi.log_tail()
    }

    fn client(&self) -> kube::Client {
        self.ns.client.clone()
    }

    fn dynamic(&self, api_version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        Api::namespaced_with(
            self.client(),
            &self.ns.name,
            &kube::api::ApiResource::from_gvk_with_plural(&gvk, plural),
        )
    }

    /// Server-side applies a manifest as given, only moved into the test's namespace.
    async fn apply(&self, mut manifest: Value) {
        manifest["metadata"]["namespace"] = json!(self.ns.name);
        let api_version = manifest["apiVersion"]
            .as_str()
            .expect("apiVersion")
            .to_owned();
        let kind = manifest["kind"].as_str().expect("kind").to_owned();
        let name = manifest["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        let plural = format!("{}s", kind.to_lowercase());
        self.dynamic(&api_version, &kind, &plural)
            .patch(
                &name,
                &PatchParams::apply("capms-test").force(),
                &Patch::Apply(&manifest),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }

    /// From now on each cluster applied with [`Env::apply_seed_cluster`] that names no
    /// credentials names Secret [`V2_SECRET`]: metal-apiserver (API v2) with a project token of
    /// the lab's project, as an operator gives capms, living `expires` (`"120s"`; 8 h when None).
    async fn use_api_v2(&mut self, expires: Option<&str>) -> V2Token {
        let minted = self.sim.mint_capms_token(LAB_PROJECT, expires).await;
        let secret = minted["secret"].as_str().expect("a token").to_owned();
        let expires = minted["token"]["expires"]
            .as_str()
            .and_then(|t| t.parse().ok());
        let uuid = minted["token"]["uuid"]
            .as_str()
            .expect("the token's uuid")
            .to_owned();
        self.apply(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": V2_SECRET},
            "stringData": self.sim.v2_credentials(&secret, LAB_PROJECT)}),
        )
        .await;
        self.credentials = Some(V2_SECRET);
        V2Token {
            uuid,
            secret,
            expires: expires.expect("the token's expiry"),
        }
    }

    /// The token in Secret [`V2_SECRET`] now.
    async fn v2_token(&self) -> Option<String> {
        let secrets: Api<Secret> = Api::namespaced(self.client(), &self.ns.name);
        let data = secrets.get(V2_SECRET).await.ok()?.data?;
        String::from_utf8(data.get("token")?.0.clone()).ok()
    }

    async fn apply_seed_cluster(&self, cluster_name: &str, mut msc: Value) {
        if let Some(name) = self.credentials
            && msc["spec"]["credentialsRef"].is_null()
        {
            msc["spec"]["credentialsRef"] = json!({"name": name});
        }
        self.apply(msc.clone()).await;
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": cluster_name},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": msc["metadata"]["name"]}}
        }))
        .await;
    }

    async fn apply_seed_machine(&self, cluster_name: &str) {
        self.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "test1-controlplane-0-user-data"},
            "stringData": {"value": "#cloud-config\nhostname: node-1\n", "format": "cloud-config"}}))
        .await;
        self.apply(fixture("metalstackmachine-initial.yaml")).await;
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": cluster_name, "labels": {"cluster.x-k8s.io/control-plane": ""}},
            "spec": {
                "clusterName": cluster_name,
                "bootstrap": {"dataSecretName": "test1-controlplane-0-user-data"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": MSM}
            }
        }))
        .await;
    }

    /// Private networks, IPs and machines as metal-api holds them, read from the simulator
    /// itself: past the faults a test injects into metal-api's answers, and uncounted.
    async fn metal_state(&self) -> (Vec<Network>, Vec<Ip>, Vec<Machine>) {
        metal_state_of(&self.sim)
    }
}

/// Private networks, IPs and machines as simulator `sim` holds them; a machine's tags with its
/// allocation's labels (API v2 keeps them apart), as capms reads them.
fn metal_state_of(sim: &RunningSim) -> (Vec<Network>, Vec<Ip>, Vec<Machine>) {
    let state = sim.sim.state();
    let networks = state.networks.values();
    let networks = networks.filter(|n| n.parentnetworkid.is_some()).cloned();
    let ips = state.ip_find(&IpFindRequest::default());
    let mut machines = state.machine_find(&MachineFindRequest::default());
    for m in &mut machines {
        let labels = state.machines.get(&m.id).map(|r| &r.allocation_labels);
        let labels = labels.into_iter().flatten();
        m.tags.extend(labels.map(|(k, v)| format!("{k}={v}")));
    }
    (networks.collect(), ips, machines)
}

/// A cluster in the default (mini-lab on loopback) inventory that lets capms allocate every
/// resource itself: no endpoint host, no preset machines.
fn lab_cluster() -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
        "metadata": {"name": MSC},
        "spec": {
            "partition": "mini-lab", "projectID": "00000000-0000-0000-0000-000000000001", "publicNetworkID": "internet-mini-lab",
            "firewallSpec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
                "rules": {"egress": [{"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"], "comment": "allow https"}]}}
        }
    })
}

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/seed000").join(name))
        .expect("fixture");
    serde_saphyr::from_str(&text).expect("YAML")
}

async fn wait_ready<K>(env: &Env, api: &Api<K>, name: &str, ready: impl Fn(&K) -> bool) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{} {name} to become ready", std::any::type_name::<K>());
    let found = support::within(support::LOADED_MACHINE_WAIT, || async {
        seen(api.get(name).await, &ready)
    })
    .await;
    found.unwrap_or_else(|seen| {
        panic!(
            "timed out waiting for {what}; {seen}; capms log:\n{}",
            env.capms_log()
        )
    })
}

/// The object when `wanted`, else (for the failure message) what it was.
fn seen<K: std::fmt::Debug>(
    got: kube::Result<K>,
    wanted: impl Fn(&K) -> bool,
) -> Result<K, String> {
    match got {
        Ok(o) if wanted(&o) => Ok(o),
        Ok(o) => Err(format!("{o:?}").chars().take(3000).collect()),
        Err(e) => Err(e.to_string()),
    }
}

fn condition<'a>(
    conditions: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

async fn wait_condition<K, F>(api: &Api<K>, name: &str, what: &str, check: F) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(&K) -> bool,
{
    eventually_seen(what, support::LOADED_MACHINE_WAIT, || async {
        seen(api.get(name).await, &check)
    })
    .await
}

fn msm_condition(m: &MetalStackMachine, type_: &str, status: &str, reason: &str) -> bool {
    m.status
        .as_ref()
        .and_then(|s| condition(&s.conditions, type_))
        .is_some_and(|c| c.status == status && c.reason == reason)
}

impl Env {
    async fn set_faults(&self, faults: Value) {
        let url = format!("{}/sim/faults", self.sim.url.trim_end_matches("/metal"));
        let response = reqwest::Client::new()
            .put(url)
            .json(&faults)
            .send()
            .await
            .expect("faults");
        assert!(response.status().is_success());
    }

    /// The metal-stack machine of MetalStackMachine `name`, by its providerID.
    async fn machine_of(&self, name: &str) -> String {
        let machines: Api<MetalStackMachine> = Api::namespaced(self.client(), &self.ns.name);
        let msm = machines.get(name).await.expect("the MetalStackMachine");
        let provider_id = msm.spec.provider_id.expect("a providerID");
        let id = metal_api::ProviderId::parse(&provider_id).expect("providerID");
        id.machine_id
    }

    async fn add_lab_machine(&self, cluster_name: &str, name: &str, secret: &str) {
        self.apply(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
            "metadata": {"name": name},
            "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}
        }))
        .await;
        self.add_owning_machine(cluster_name, name, secret).await;
    }

    async fn add_owning_machine(&self, cluster_name: &str, name: &str, secret: &str) {
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"clusterName": cluster_name, "bootstrap": {"dataSecretName": secret},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": name}}
        }))
        .await;
    }

    async fn add_machine(&self, cluster_name: &str, name: &str, secret: &str, annotations: Value) {
        let mut msm = fixture("metalstackmachine-initial.yaml");
        msm["metadata"]["name"] = json!(name);
        msm["metadata"]["annotations"] = annotations;
        msm["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("providerID");
        self.apply(msm).await;
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"clusterName": cluster_name, "bootstrap": {"dataSecretName": secret},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": name}}
        }))
        .await;
    }
}

async fn bind_user(env: &Env, user: &str, role: Value) {
    let client = env.client();
    let role_name = role["metadata"]["name"].as_str().expect("name").to_owned();
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    roles
        .patch(
            &role_name,
            &PatchParams::apply("capms-test").force(),
            &Patch::Apply(&role),
        )
        .await
        .expect("cluster role");
    let binding = support::user_binding(user, &role_name);
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client);
    bindings
        .patch(
            user,
            &PatchParams::apply("capms-test").force(),
            &Patch::Apply(&binding),
        )
        .await
        .expect("binding");
}

mod api_v2;
mod autoscaling;
mod clusterctl_upgrade;
mod concurrent_writers;
mod conditions;
mod crash_points;
mod credentials;
mod failure_domains;
mod go_provider;
mod kube_faults;
mod looks;
mod machine_sets;
mod metal_faults;
mod moving;
mod orphans;
mod remediation;
mod resilience;
mod rollout;
mod seed;
mod switch_over;
mod templates;
mod way_back;

use moving::{moved, pause};
