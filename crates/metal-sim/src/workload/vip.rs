//! The control-plane IP as kube-vip makes it reachable: announced from the control-plane
//! machines, so a connection to it lands on one of their API servers. The stand-in listens on
//! the IP and hands every connection to the first member that accepts it; a connection ends when
//! its member is taken out of the routes (the member left, or its etcd stopped), as it would when
//! a health-checked load balancer drops a backend.

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The announced control-plane IP; dropping it withdraws the announcement and ends every
/// connection through it.
pub struct Vip {
    routes: watch::Sender<Vec<SocketAddr>>,
    task: tokio::task::JoinHandle<()>,
}

impl Vip {
    /// Listens on `address` (a loopback address: callers check).
    pub async fn announce(address: SocketAddr) -> std::io::Result<Vip> {
        let listener = TcpListener::bind(address).await?;
        let (routes, watched) = watch::channel(Vec::new());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, watched.clone()));
            }
        });
        Ok(Vip { routes, task })
    }

    /// The API servers the IP leads to, in order of preference.
    pub fn route_to(&self, members: Vec<SocketAddr>) {
        self.routes.send_if_modified(|routes| {
            let changed = *routes != members;
            *routes = members;
            changed
        });
    }
}

impl Drop for Vip {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, mut routes: watch::Receiver<Vec<SocketAddr>>) {
    let candidates = routes.borrow_and_update().clone();
    for backend in candidates {
        if let Ok(mut server) = TcpStream::connect(backend).await {
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                () = withdrawn(&mut routes, backend) => {}
            }
            return;
        }
    }
}

/// Resolves once `backend` is no longer among the routes (or the IP is withdrawn).
async fn withdrawn(routes: &mut watch::Receiver<Vec<SocketAddr>>, backend: SocketAddr) {
    while routes.changed().await.is_ok() {
        if !routes.borrow_and_update().contains(&backend) {
            return;
        }
    }
}
