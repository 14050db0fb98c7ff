//! The server's and the client's network seams on turmoil's simulated TCP.

use std::io;
use std::net::SocketAddr;

use ticketing_server::net::{AcceptBoxed, BoxConn, BoxFuture};
use turmoil::net::{TcpListener, TcpStream};

/// A client port on the simulated network.
pub struct Listener(pub TcpListener);

impl ticketing_server::net::Accept for Listener {
    type Stream = TcpStream;

    async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        self.0.accept().await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// The simulated network, for the peer port and links and for the clients.
#[derive(Debug, Default, Clone, Copy)]
pub struct Net;

impl ticketing_server::net::Net for Net {
    fn bind<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn AcceptBoxed>>> {
        Box::pin(async move { Ok(Box::new(Listener(TcpListener::bind(addr).await?)) as Box<dyn AcceptBoxed>) })
    }

    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxConn>> {
        Box::pin(async move { Ok(Box::new(TcpStream::connect(addr).await?) as BoxConn) })
    }
}

impl ticketing_client::Connect for Net {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
    ) -> ticketing_client::BoxFuture<'a, io::Result<Box<dyn ticketing_client::Stream>>> {
        Box::pin(async move { Ok(Box::new(TcpStream::connect(addr).await?) as Box<dyn ticketing_client::Stream>) })
    }
}
