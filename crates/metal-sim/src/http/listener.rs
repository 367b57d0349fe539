//! The simulator's listener: the `drop_rate` fault closes new connections before a request is
//! read, as a connection lost on its way to metal-api does.

use super::{Sim, happens};
use std::time::Duration;

/// A listener that closes a configurable fraction of new connections before reading a request.
pub struct FaultyListener {
    pub inner: tokio::net::TcpListener,
    pub sim: Sim,
}

impl axum::serve::Listener for FaultyListener {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    let drop_rate = self.sim.state().faults.drop_rate;
                    let dropped = happens(drop_rate);
                    {
                        let counts = &mut self.sim.stats().faults;
                        counts.connections += 1;
                        counts.dropped += u64::from(dropped);
                    }
                    if dropped {
                        drop(io);
                        continue;
                    }
                    return (io, addr);
                }
                // Accept errors (e.g. too many open files) are transient; back off briefly.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
