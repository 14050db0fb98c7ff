//! Where a node's ports accept connections and its peer links dial them:
//! TCP in the server ([`Tcp`]), a simulated network in a simulation. The
//! client port stays generic over its listener ([`Accept`]) so its hot path
//! is compiled for the real socket; the peer links are boxed streams
//! already (TLS or not), so they take any [`Net`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

/// A byte stream both ways (a TCP connection, a TLS session over one, or a
/// simulated connection).
pub trait Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Conn for T {}

/// A boxed [`Conn`].
pub type BoxConn = Box<dyn Conn>;

/// A boxed future of the network's answers.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A bound port: accepts connections with the address they come from.
pub trait Accept: Send + Sync + 'static {
    /// What a connection is.
    type Stream: Conn;
    /// The next connection (Nagle off where that applies).
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;
    /// The address it is bound to.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

impl Accept for TcpListener {
    type Stream = TcpStream;

    async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (s, from) = TcpListener::accept(self).await?;
        let _ = s.set_nodelay(true);
        Ok((s, from))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}

/// A boxed [`Accept`] (the peer port).
pub trait AcceptBoxed: Send + Sync + 'static {
    /// The next connection.
    fn accept_boxed(&self) -> BoxFuture<'_, io::Result<(BoxConn, SocketAddr)>>;
}

impl<A: Accept> AcceptBoxed for A {
    fn accept_boxed(&self) -> BoxFuture<'_, io::Result<(BoxConn, SocketAddr)>> {
        Box::pin(async move {
            let (s, from) = self.accept().await?;
            Ok((Box::new(s) as BoxConn, from))
        })
    }
}

/// The network a cluster node's peer port binds on and its peer links dial.
pub trait Net: Send + Sync + std::fmt::Debug + 'static {
    /// Binds `addr` (`host:port`).
    fn bind<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn AcceptBoxed>>>;
    /// Connects to `addr` (`host:port`), Nagle off.
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxConn>>;
}

/// TCP: what the server runs on.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tcp;

impl Net for Tcp {
    fn bind<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn AcceptBoxed>>> {
        Box::pin(async move { Ok(Box::new(TcpListener::bind(addr).await?) as Box<dyn AcceptBoxed>) })
    }

    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxConn>> {
        Box::pin(async move {
            let s = TcpStream::connect(addr).await?;
            let _ = s.set_nodelay(true);
            Ok(Box::new(s) as BoxConn)
        })
    }
}
