//! Reading bootstrap data and issuing kubeadm's certificates, without processes.

use super::bootstrap::{self, BootstrapError, Files, HostPort, Role};
use super::pki::{Ca, Leaf, ca_cert_hash};
use base64::Engine;

/// A test CA in the form Cluster API writes it (RSA, PKCS#1 key).
const CA_CRT: &str = include_str!("testdata/ca.crt");
const CA_KEY: &str = include_str!("testdata/ca.key");

const KUBE_VIP: &str = "apiVersion: v1
kind: Pod
spec:
  containers:
    - name: kube-vip
      image: ghcr.io/kube-vip/kube-vip:v0.8.10
      env:
        - {name: address, value: \"127.100.0.250\"}
        - {name: port, value: \"6443\"}
        - {name: cp_enable, value: \"true\"}
";

fn indent(text: &str, by: usize) -> String {
    text.lines()
        .map(|l| format!("{}{l}\n", " ".repeat(by)))
        .collect()
}

/// Init bootstrap data in the shape the kubeadm bootstrap provider renders it.
fn init_cloud_config() -> String {
    let kubeadm = "---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
                   clusterName: kc\ncontrolPlaneEndpoint: 127.100.0.250:6443\n\
                   kubernetesVersion: v1.33.5\nnetworking:\n  serviceSubnet: 10.96.0.0/12\n\
                   ---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n";
    format!(
        "## template: jinja\n#cloud-config\n\nwrite_files:\n\
         -   path: /etc/kubernetes/pki/ca.crt\n    owner: root:root\n    permissions: '0640'\n    content: |\n{}\
         -   path: /etc/kubernetes/pki/ca.key\n    encoding: \"base64\"\n    content: |\n      {}\n\
         -   path: /etc/kubernetes/manifests/kube-vip.yaml\n    content: |\n{}\
         -   path: /run/kubeadm/kubeadm.yaml\n    content: |\n{}\
         runcmd:\n  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success'\n",
        indent(CA_CRT, 6),
        base64::engine::general_purpose::STANDARD.encode(CA_KEY),
        indent(KUBE_VIP, 6),
        indent(kubeadm, 6),
    )
}

#[test]
fn init_data_yields_the_files_role_endpoint_and_vip() {
    let files = bootstrap::files(&init_cloud_config()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        files.text("/etc/kubernetes/pki/ca.key").as_deref(),
        Some(CA_KEY),
        "base64 content decoded"
    );
    let Ok(Some(Role::Init(init))) = bootstrap::role(&files) else {
        panic!("an init machine: {:?}", bootstrap::role(&files));
    };
    let endpoint = HostPort {
        host: "127.100.0.250".into(),
        port: 6443,
    };
    assert_eq!(init.endpoint, endpoint);
    assert_eq!(init.version, "v1.33.5");
    assert_eq!(init.service_subnet, "10.96.0.0/12");
    assert_eq!(bootstrap::kube_vip(&files), Some(endpoint));
}

#[test]
fn user_data_is_read_base64_encoded_or_verbatim() {
    let plain = init_cloud_config();
    let encoded = base64::engine::general_purpose::STANDARD.encode(&plain);
    assert_eq!(bootstrap::files(&plain), bootstrap::files(&encoded));
    assert_eq!(
        bootstrap::files(""),
        Ok(bootstrap::Files::default()),
        "a firewall's empty user data writes nothing"
    );
    assert_eq!(bootstrap::files("echo hello"), Err(BootstrapError::Format));
}

#[test]
fn ignition_files_are_read_from_data_urls() {
    let join = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n\
                discovery:\n  bootstrapToken:\n    apiServerEndpoint: 127.100.0.250:6443\n    \
                token: abcdef.0123456789abcdef\n    caCertHashes: [\"sha256:00\"]\n";
    let encoded: String =
        percent_encoding::utf8_percent_encode(join, percent_encoding::NON_ALPHANUMERIC).collect();
    let ignition = serde_json::json!({
        "ignition": {"version": "2.3.0"},
        "storage": {"files": [
            {"path": bootstrap::IGNITION_CONFIG, "contents": {"source": format!("data:,{encoded}")}},
            {"path": "/etc/motd", "contents": {"source": "data:;base64,aGk="}},
        ]},
    })
    .to_string();
    let files = bootstrap::files(&ignition).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(files.text("/etc/motd").as_deref(), Some("hi"));
    let Ok(Some(Role::JoinWorker(plan))) = bootstrap::role(&files) else {
        panic!("a worker: {:?}", bootstrap::role(&files));
    };
    assert_eq!(plan.token, "abcdef.0123456789abcdef");
    assert_eq!(plan.ca_cert_hashes, ["sha256:00"]);
    assert_eq!(plan.endpoint.to_string(), "127.100.0.250:6443");
}

#[test]
fn kubeadm_init_is_told_by_its_cluster_configuration_wherever_it_is() {
    let init = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
                controlPlaneEndpoint: 127.100.0.250:6443\nkubernetesVersion: v1.33.5\n---\n\
                apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n";
    for path in [bootstrap::INIT_CONFIG, bootstrap::IGNITION_CONFIG] {
        let files = Files([(path.to_owned(), init.as_bytes().to_vec())].into());
        let Ok(Some(Role::Init(plan))) = bootstrap::role(&files) else {
            panic!("init at {path}: {:?}", bootstrap::role(&files));
        };
        assert_eq!(plan.endpoint.to_string(), "127.100.0.250:6443");
        assert_eq!(plan.version, "v1.33.5");
    }
    let neither = Files(
        [(
            bootstrap::IGNITION_CONFIG.to_owned(),
            b"kind: Other\n".to_vec(),
        )]
        .into(),
    );
    assert_eq!(
        bootstrap::role(&neither).map_err(|e| e.to_string()),
        Err(
            "/etc/kubeadm.yml: neither a ClusterConfiguration (kubeadm init) nor a \
             JoinConfiguration (kubeadm join)"
                .into()
        )
    );
}

#[test]
fn a_control_plane_join_is_told_from_a_worker_join() {
    let join = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ncontrolPlane: {}\n\
                discovery:\n  bootstrapToken:\n    apiServerEndpoint: 127.100.0.250:6443\n    \
                token: abcdef.0123456789abcdef\n";
    let data = format!(
        "#cloud-config\nwrite_files:\n-   path: {}\n    content: |\n{}",
        bootstrap::JOIN_CONFIG,
        indent(join, 6)
    );
    let files = bootstrap::files(&data).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        bootstrap::role(&files),
        Ok(Some(Role::JoinControlPlane(_)))
    ));
}

#[test]
fn unsupported_encodings_name_the_field_and_the_valid_choices() {
    let data = "#cloud-config\nwrite_files:\n- path: /a\n  content: x\n- path: /b\n  encoding: gzip\n  content: x\n";
    assert_eq!(
        bootstrap::files(data).map_err(|e| e.to_string()),
        Err("write_files[1].encoding: encoding \"gzip\" is not supported; valid: text/plain, b64, base64".into())
    );
}

#[test]
fn no_kube_vip_means_nothing_announces_the_endpoint() {
    let data =
        init_cloud_config().replace("cp_enable, value: \"true\"", "cp_enable, value: \"false\"");
    let files = bootstrap::files(&data).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bootstrap::kube_vip(&files), None);
}

#[test]
fn a_pkcs1_rsa_ca_signs_kubeadm_certificates() {
    let ca = Ca::load("ca", CA_CRT.as_bytes(), CA_KEY.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let issued = ca
        .issue(&Leaf {
            common_name: "kube-apiserver",
            organization: None,
            dns: &["kubernetes"],
            ips: &["127.100.0.250".parse().unwrap_or_else(|e| panic!("{e}"))],
            server: true,
            client: false,
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let der = rustls::pki_types::pem::PemObject::from_pem_slice(issued.cert_pem.as_bytes())
        .map(|d: rustls::pki_types::CertificateDer<'_>| d.to_vec())
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cert.issuer().to_string(), "CN=kubernetes");
    let hash = ca_cert_hash(CA_CRT.as_bytes()).unwrap_or_default();
    assert!(hash.starts_with("sha256:") && hash.len() == 71, "{hash}");
}
