//! A management cluster's parts on a real kube-apiserver: our CRDs and the real Cluster API core
//! manager (`controlplane`), the release files through the real clusterctl (`install`), the
//! admission webhooks as kubectl meets them (`webhooks`), a cert-manager-backed install
//! (`certmanager`) and the manager runtime as a library (`runtime`).

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;

mod certmanager;
mod controlplane;
mod install;
mod runtime;
mod webhooks;
