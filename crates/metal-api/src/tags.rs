//! Tag and label keys metal-stack's components agree on, so that what one allocates the others
//! find: metal-ccm, metalctl filters, the firewall controller and the providers.

/// metal-lib's cluster id key: on a cluster's network (label) and its machines and IPs (tags).
pub const CLUSTER_ID: &str = "cluster.metal-stack.io/id";
/// The machine an IP is bound to (metal-api sets it on IPs a machine acquired).
pub const MACHINE_ID: &str = "machine.metal-stack.io/id";
/// metal-lib's label of the network a partition's clusters reach the outside through by default.
pub const NETWORK_DEFAULT: &str = "network.metal-stack.io/default";
/// Kubernetes' well-known zone label, as a machine tag: the machine's partition.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// Kubernetes' well-known hostname label, as a machine tag: the machine's hostname.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
