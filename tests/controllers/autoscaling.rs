//! Autoscaling from zero, as the cluster-autoscaler's Cluster API provider reads it: a
//! MachineDeployment at zero replicas, with the autoscaler's size annotations, whose
//! MetalStackMachineTemplate (reached through its infrastructureRef, with the shipped
//! ClusterRole for the autoscaler) says what a node would have; kept current as metal-api's
//! size changes, and a condition, not a guess, for a size metal-api lacks.

use super::*;
use k8s_openapi::api::rbac::v1::ClusterRole;
use metal_api::types::SizeConstraint;

const DEPLOYMENT: &str = "gpu-workers";
const GPU_SIZE: &str = "g1-medium-x86";
const AUTOSCALER: &str = "capms-test-autoscaler";

/// A size with GPUs, made by an operator after the simulator started: its architecture label
/// too.
fn add_gpu_size(env: &Env, cores: u64) {
    let constraint = |type_: &str, min: u64, max: u64, identifier: &str| SizeConstraint {
        type_: type_.into(),
        min,
        max,
        identifier: identifier.into(),
    };
    let size = Size {
        id: GPU_SIZE.into(),
        name: GPU_SIZE.into(),
        constraints: vec![
            constraint("cores", cores, 64, ""),
            constraint("memory", 64 << 30, 128 << 30, ""),
            constraint("storage", 960_000_000_000, 2_000_000_000_000, ""),
            constraint("gpu", 2, 2, "AD102GL*"),
        ],
        labels: [("kubernetes.io/arch".to_owned(), "arm64".to_owned())].into(),
        ..Default::default()
    };
    env.sim.sim.state().sizes.insert(GPU_SIZE.into(), size);
}

fn template(name: &str, size: &str) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachineTemplate",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"image": "ubuntu-26.4", "machineType": size}}}
    })
}

/// A MachineDeployment the autoscaler may scale between 0 and 5, at 0.
fn deployment(template: &str) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
        "metadata": {"name": DEPLOYMENT, "annotations": {
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "0",
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5"}},
        "spec": {
            "clusterName": MSC, "replicas": 0,
            "selector": {"matchLabels": {"deployment": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"deployment": DEPLOYMENT}},
                "spec": {"clusterName": MSC, "bootstrap": {"dataSecretName": "bootstrap"},
                         "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                               "kind": "MetalStackMachineTemplate", "name": template}}
            }
        }
    })
}

/// The autoscaler's identity: its own ClusterRole reads MachineDeployments and aggregates the
/// shipped one for the templates, as the docs tell an operator to set it up.
async fn autoscaler_client(env: &Env) -> kube::Client {
    let text = std::fs::read_to_string(repo_root().join("manifests/rbac/autoscaler.yaml"))
        .expect("autoscaler.yaml");
    let shipped: Value = serde_saphyr::from_str(&text).expect("YAML");
    let roles: Api<ClusterRole> = Api::all(env.client());
    let apply = PatchParams::apply("capms-test").force();
    let name = shipped["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    roles
        .patch(&name, &apply, &Patch::Apply(&shipped))
        .await
        .expect("shipped role");
    let aggregating = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": AUTOSCALER},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": shipped["metadata"]["labels"].clone()}]}
    });
    bind_user(env, AUTOSCALER, aggregating).await;
    let reads_deployments = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("{AUTOSCALER}-capi"), "labels": shipped["metadata"]["labels"].clone()},
        "rules": [{"apiGroups": ["cluster.x-k8s.io"], "resources": ["machinedeployments"], "verbs": ["get", "list", "watch"]}]
    });
    let capi_name = format!("{AUTOSCALER}-capi");
    roles
        .patch(&capi_name, &apply, &Patch::Apply(&reads_deployments))
        .await
        .expect("role");
    let kubeconfig = ControlPlane::shared().user_kubeconfig(AUTOSCALER, env.work.path());
    let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// What the autoscaler reads for a node group at zero: the MachineDeployment's template,
/// through its infrastructureRef, and that template's capacity and node info.
async fn node_of_group(autoscaler: &kube::Client, ns: &str) -> Result<(Value, Value), String> {
    let gvk = |g: &str, v: &str, k: &str| kube::api::GroupVersionKind::gvk(g, v, k);
    let resource = |g, p: &str| kube::api::ApiResource::from_gvk_with_plural(&g, p);
    let deployments = resource(
        gvk("cluster.x-k8s.io", "v1beta2", "MachineDeployment"),
        "machinedeployments",
    );
    let md = Api::<DynamicObject>::namespaced_with(autoscaler.clone(), ns, &deployments)
        .get(DEPLOYMENT)
        .await
        .map_err(|e| format!("reading the MachineDeployment: {e}"))?;
    let reference = &md.data["spec"]["template"]["spec"]["infrastructureRef"];
    let (group, kind) = (reference["apiGroup"].as_str(), reference["kind"].as_str());
    let (Some(group), Some(kind)) = (group, kind) else {
        return Err(format!("no infrastructureRef: {reference}"));
    };
    let plural = format!("{}s", kind.to_lowercase());
    let templates = resource(gvk(group, "v1alpha4", kind), &plural);
    let name = reference["name"].as_str().unwrap_or_default();
    let t = Api::<DynamicObject>::namespaced_with(autoscaler.clone(), ns, &templates)
        .get(name)
        .await
        .map_err(|e| format!("reading {kind} {name}: {e}"))?;
    let status = &t.data["status"];
    match (&status["capacity"], &status["nodeInfo"]) {
        (Value::Object(_), Value::Object(_)) => {
            Ok((status["capacity"].clone(), status["nodeInfo"].clone()))
        }
        _ => Err(format!("template status {status}")),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_deployment_at_zero_shows_the_autoscaler_what_a_node_of_its_size_has() {
    let mut env = Env::with_inventory("autoscale", Inventory::default_lab()).await;
    add_gpu_size(&env, 16);
    // capms runs with the shipped ClusterRole, so its rules for templates are proven too.
    let user = format!("capms-{}", env.ns.name);
    bind_user(&env, &user, shipped_cluster_role(&user, true)).await;
    env.kubeconfig = Some(ControlPlane::shared().user_kubeconfig(&user, env.work.path()));
    env.start_capms(&["--catalog-refresh=2s"]);
    env.apply(template("gpu", GPU_SIZE)).await;
    env.apply(deployment("gpu")).await;

    let autoscaler = autoscaler_client(&env).await;
    let ns = env.ns.name.clone();
    let (capacity, node) = eventually_seen(
        "the template's capacity",
        support::LOADED_MACHINE_WAIT,
        || node_of_group(&autoscaler, &ns),
    )
    .await;
    assert_eq!(
        capacity,
        json!({"cpu": "16", "memory": "64Gi", "ephemeral-storage": "960G", "nvidia.com/gpu": "2"})
    );
    assert_eq!(
        node,
        json!({"architecture": "arm64", "operatingSystem": "linux"})
    );
    // The autoscaler's role reads templates, nothing of capms's else.
    let machines: Api<MetalStackMachine> = Api::namespaced(autoscaler.clone(), &ns);
    let refused = machines.list(&Default::default()).await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{refused:?}"
    );

    // An operator gives the size more cores: the next catalog refresh brings them.
    add_gpu_size(&env, 32);
    eventually_seen(
        "the template to follow the size",
        support::LOADED_MACHINE_WAIT,
        || async {
            let (capacity, _) = node_of_group(&autoscaler, &ns).await?;
            match capacity["cpu"].as_str() {
                Some("32") => Ok(()),
                _ => Err(format!("capacity {capacity}")),
            }
        },
    )
    .await;

    // A size metal-api does not have: a condition naming the sizes there are, and no capacity.
    env.apply(template("unknown", "n1-huge-x86")).await;
    let templates = env.dynamic(
        "infrastructure.cluster.x-k8s.io/v1alpha4",
        "MetalStackMachineTemplate",
        "metalstackmachinetemplates",
    );
    let message = eventually_seen(
        "the unknown size's condition",
        support::LOADED_MACHINE_WAIT,
        || async {
            let t = templates.get("unknown").await.map_err(|e| e.to_string())?;
            let conditions = t.data["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let known = conditions.iter().find(|c| c["type"] == "CapacityKnown");
            match known {
                Some(c) if c["reason"] == "UnknownSize" && c["status"] == "False" => Ok((
                    c["message"].as_str().unwrap_or_default().to_owned(),
                    t.data["status"].clone(),
                )),
                _ => Err(format!(
                    "status {}; capms log:\n{}",
                    t.data["status"],
                    env.capms_log()
                )),
            }
        },
    )
    .await;
    let (message, status) = message;
    assert!(
        message.contains("n1-huge-x86")
            && message.contains(&format!("valid: {GPU_SIZE}, v1-small-x86")),
        "{message}"
    );
    assert!(
        status.get("capacity").is_none() && status.get("nodeInfo").is_none(),
        "{status}"
    );
}
