//! The control-plane IP as kube-vip makes it reachable: announced from the control-plane
//! machines, so a connection to it lands on one of their API servers. The stand-in listens on
//! the IP and hands every connection to the first member that accepts it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

/// The announced control-plane IP; dropping it withdraws the announcement.
pub struct Vip {
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Vip {
    /// Listens on `address` (a loopback address: callers check).
    pub async fn announce(address: SocketAddr) -> std::io::Result<Vip> {
        let listener = TcpListener::bind(address).await?;
        let backends: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
        let shared = backends.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let candidates = shared.lock().map(|b| b.clone()).unwrap_or_default();
                tokio::spawn(relay(client, candidates));
            }
        });
        Ok(Vip { backends, task })
    }

    /// The API servers the IP leads to, in order of preference.
    pub fn route_to(&self, members: Vec<SocketAddr>) {
        if let Ok(mut backends) = self.backends.lock() {
            *backends = members;
        }
    }
}

impl Drop for Vip {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, candidates: Vec<SocketAddr>) {
    for backend in candidates {
        if let Ok(mut server) = TcpStream::connect(backend).await {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            return;
        }
    }
}
