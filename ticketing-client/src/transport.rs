//! One connection's transport: TCP (+ TLS) opened by a small task that then
//! moves bytes between the socket and the driver (docs/client.md). On plain
//! TCP the driver writes to the socket itself while nothing is queued for
//! the task (one task wake-up fewer per request); what the socket does not
//! take at once, and everything on TLS, goes through the task's queue.

use crate::driver::{Io, OUTBOUND_QUEUE};
use crate::tls;
use bytes::{Buf, Bytes};
use rustls::ClientConfig;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use ticketing_proto::broker::ConnId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// A byte stream both ways (TCP, TLS over it, or a simulated connection).
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A boxed future.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A network the connections dial instead of TCP: a simulated one in a
/// simulation ([`crate::Builder::connector`]).
pub trait Connect: Send + Sync + std::fmt::Debug + 'static {
    /// Connects to `addr` (`host:port`).
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, std::io::Result<Box<dyn Stream>>>;
}

/// How a connection is opened: TCP (with TLS if configured), or another network.
#[derive(Debug, Clone)]
pub(crate) enum Dial {
    Tcp(Option<Arc<ClientConfig>>),
    Other(Arc<dyn Connect>),
}

pub(crate) struct ConnHandle {
    tx: mpsc::Sender<Bytes>,
    task: JoinHandle<()>,
    direct: Arc<Direct>,
}

/// What the driver needs to write to a plain TCP connection itself, without
/// waking its writer task: the socket once it is open, and how many chunks
/// handed to the writer are not fully written yet. Only when that is 0 may
/// the driver write directly (bytes keep their order); whatever the socket
/// does not take at once goes to the writer. TLS connections never set
/// `stream`: everything goes through the writer.
#[derive(Default)]
struct Direct {
    stream: OnceLock<Arc<TcpStream>>,
    queued: AtomicUsize,
}

impl ConnHandle {
    /// Starts the connection's task (connect, then read and write).
    pub(crate) fn spawn(conn: ConnId, addr: String, dial: Dial, io: mpsc::Sender<Io>) -> ConnHandle {
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        let direct = Arc::new(Direct::default());
        let task = tokio::spawn(connection(conn, addr, dial, io, rx, direct.clone()));
        ConnHandle { tx, task, direct }
    }

    /// Ends the connection's task (the socket closes once the driver drops this handle too).
    pub(crate) fn abort(&self) {
        self.task.abort();
    }

    /// Hands `data` to the transport without waiting: written at once when
    /// the socket takes it, else queued for the writer.
    pub(crate) fn send(&self, mut data: Bytes) -> Result<(), Stalled> {
        if self.direct.queued.load(Ordering::Acquire) == 0 {
            if let Some(tcp) = self.direct.stream.get() {
                match tcp.try_write(&data) {
                    Ok(n) if n == data.len() => return Ok(()),
                    Ok(n) => data.advance(n),
                    // Would block, or failed: the writer waits, or meets the error and ends the connection.
                    Err(_) => {}
                }
            }
        }
        self.direct.queued.fetch_add(1, Ordering::AcqRel);
        let pushed = push_outbound(&self.tx, data);
        if pushed.is_err() {
            self.direct.queued.fetch_sub(1, Ordering::AcqRel);
        }
        pushed
    }
}

/// One transport: TCP (+ TLS), then bytes both ways until either side ends.
async fn connection(
    conn: ConnId,
    addr: String,
    dial: Dial,
    io: mpsc::Sender<Io>,
    outbound: mpsc::Receiver<Bytes>,
    direct: Arc<Direct>,
) {
    let stream = match open(&addr, dial).await {
        Ok(s) => s,
        Err(e) => {
            debug!(conn = conn.0, %addr, error = %e, "connect failed");
            let _ = io.send(Io::Failed(conn, format!("{addr}: {e}"))).await;
            return;
        }
    };
    let read_error = match stream {
        Opened::Plain(tcp) => {
            let tcp = Arc::new(tcp);
            let _ = direct.stream.set(tcp.clone());
            serve_plain(conn, &tcp, &io, outbound, &direct).await
        }
        Opened::Boxed(stream) => serve_boxed(conn, stream, &io, outbound, &direct).await,
    };
    match read_error {
        Some(e) => {
            let _ = io.send(Io::Failed(conn, format!("{addr}: {e}"))).await;
        }
        None => {
            let _ = io.send(Io::Lost(conn)).await;
        }
    }
}

/// Socket reads are taken in chunks of this size.
const READ_BUF: usize = 16 * 1024;

/// Hands a chunk read to the driver, waiting while its input queue is full
/// (back-pressure). False once the driver is gone.
async fn deliver(io: &mpsc::Sender<Io>, conn: ConnId, data: &[u8]) -> bool {
    io.send(Io::Data(conn, Bytes::copy_from_slice(data))).await.is_ok()
}

/// Plain TCP, shared with the driver's direct writes ([`ConnHandle::send`]):
/// the read error if reading failed, `None` on EOF or a failed write.
async fn serve_plain(
    conn: ConnId,
    tcp: &TcpStream,
    io: &mpsc::Sender<Io>,
    mut outbound: mpsc::Receiver<Bytes>,
    direct: &Direct,
) -> Option<std::io::Error> {
    let reader = async {
        let mut buf = vec![0u8; READ_BUF];
        loop {
            if let Err(e) = tcp.readable().await {
                return Some(e);
            }
            match tcp.try_read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => {
                    if !deliver(io, conn, &buf[..n]).await {
                        return None;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Some(e),
            }
        }
    };
    let writer = async {
        let mut batch = Vec::new();
        while let Some(first) = outbound.recv().await {
            let chunks = coalesce(first, &mut outbound, &mut batch);
            let mut rest = &batch[..];
            while !rest.is_empty() {
                if let Err(e) = tcp.writable().await {
                    warn!(conn = conn.0, error = %e, "write failed");
                    return;
                }
                match tcp.try_write(rest) {
                    Ok(n) => rest = &rest[n..],
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        warn!(conn = conn.0, error = %e, "write failed");
                        return;
                    }
                }
            }
            // Only now may the driver write directly again: the queued bytes are out.
            direct.queued.fetch_sub(chunks, Ordering::AcqRel);
        }
    };
    tokio::select! {
        e = reader => e,
        _ = writer => None,
    }
}

/// TLS or another network: a reader and a writer on the split stream (the
/// driver never writes directly: every chunk goes through the queue).
async fn serve_boxed(
    conn: ConnId,
    stream: Box<dyn Stream>,
    io: &mpsc::Sender<Io>,
    mut outbound: mpsc::Receiver<Bytes>,
    direct: &Direct,
) -> Option<std::io::Error> {
    let (mut rd, mut wr) = tokio::io::split(stream);
    // A read error is reported as the transport failure (`last_error`): with
    // TLS 1.3 a server that refuses our client certificate says so only
    // after our side of the handshake, as an alert on the first read.
    let reader = async move {
        let mut buf = vec![0u8; READ_BUF];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => return None,
                Err(e) => return Some(e),
                Ok(n) => {
                    if !deliver(io, conn, &buf[..n]).await {
                        return None;
                    }
                }
            }
        }
    };
    let writer = async move {
        let mut batch = Vec::new();
        while let Some(first) = outbound.recv().await {
            let chunks = coalesce(first, &mut outbound, &mut batch);
            if let Err(e) = wr.write_all(&batch).await {
                warn!(conn = conn.0, error = %e, "write failed");
                break;
            }
            if wr.flush().await.is_err() {
                break;
            }
            direct.queued.fetch_sub(chunks, Ordering::AcqRel);
        }
        let _ = wr.shutdown().await;
    };
    tokio::select! {
        e = reader => e,
        _ = writer => None,
    }
}

/// An open transport.
enum Opened {
    Plain(TcpStream),
    Boxed(Box<dyn Stream>),
}

async fn open(addr: &str, dial: Dial) -> std::io::Result<Opened> {
    let tls = match dial {
        Dial::Tcp(tls) => tls,
        Dial::Other(net) => return Ok(Opened::Boxed(net.connect(addr).await?)),
    };
    let tcp = TcpStream::connect(addr).await.map_err(|e| std::io::Error::new(e.kind(), format!("connect: {e}")))?;
    let _ = tcp.set_nodelay(true);
    match tls {
        None => Ok(Opened::Plain(tcp)),
        Some(config) => {
            let name = tls::server_name(addr).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| std::io::Error::new(e.kind(), format!("tls handshake: {e}")))?;
            Ok(Opened::Boxed(Box::new(stream)))
        }
    }
}

/// Bytes a writer may gather from its queue into one write.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Puts `first`, followed by the chunks already waiting in `queue` (up to
/// [`WRITE_BATCH_BYTES`]), in order, into `batch` (a reused buffer), to be
/// written at once. Returns how many chunks it took.
fn coalesce(first: Bytes, queue: &mut mpsc::Receiver<Bytes>, batch: &mut Vec<u8>) -> usize {
    batch.clear();
    batch.extend_from_slice(&first);
    let mut chunks = 1;
    while batch.len() < WRITE_BATCH_BYTES {
        match queue.try_recv() {
            Ok(more) => {
                batch.extend_from_slice(&more);
                chunks += 1;
            }
            Err(_) => break,
        }
    }
    chunks
}

/// A connection's outbound queue is full.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stalled;

/// Queues `data` for a connection's writer without waiting.
fn push_outbound(tx: &mpsc::Sender<Bytes>, data: Bytes) -> Result<(), Stalled> {
    match tx.try_send(data) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Full(_)) => Err(Stalled),
        // The writer ended: its `Io::Lost` is on the way.
        Err(mpsc::error::TrySendError::Closed(_)) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use tokio::io::AsyncReadExt;

    /// Direct writes while the socket takes them, the writer task once it
    /// does not (a peer that stops reading): every byte arrives, in order.
    #[test]
    fn direct_writes_and_the_writer_keep_the_byte_order() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let (io_tx, _io_rx) = mpsc::channel(8);
            let handle = ConnHandle::spawn(ConnId(1), addr, Dial::Tcp(None), io_tx);
            let (mut peer, _) =
                tokio::time::timeout(Duration::from_secs(10), listener.accept()).await.unwrap().unwrap();
            let until = Instant::now() + Duration::from_secs(10);
            while handle.direct.stream.get().is_none() {
                assert!(Instant::now() < until, "the connection task never opened the socket");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // The peer reads nothing yet: the socket fills, then chunks queue for the writer.
            const CHUNK: usize = 16 * 1024;
            let (mut sent, mut queued_seen, mut after) = (0u32, false, 0);
            while after < 16 {
                assert!(sent < 4096, "the socket never stopped taking bytes");
                let chunk: Vec<u8> = sent.to_be_bytes().iter().copied().cycle().take(CHUNK).collect();
                handle.send(Bytes::from(chunk)).expect("the queue has room");
                sent += 1;
                if handle.direct.queued.load(Ordering::Acquire) > 0 {
                    queued_seen = true;
                }
                if queued_seen {
                    after += 1;
                }
            }
            // Now the peer reads everything: chunk i is i's bytes, in order.
            let mut got = vec![0u8; sent as usize * CHUNK];
            tokio::time::timeout(Duration::from_secs(30), peer.read_exact(&mut got)).await.unwrap().unwrap();
            for (i, chunk) in got.chunks(CHUNK).enumerate() {
                let want: Vec<u8> = (i as u32).to_be_bytes().iter().copied().cycle().take(CHUNK).collect();
                assert!(chunk == &want[..], "chunk {i} of {sent} is out of place");
            }
            // The writer has written everything: direct writes may go again.
            let until = Instant::now() + Duration::from_secs(10);
            while handle.direct.queued.load(Ordering::Acquire) != 0 {
                assert!(Instant::now() < until, "the writer never caught up");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            handle.abort();
        });
    }

    #[test]
    fn a_full_outbound_queue_is_reported_not_skipped() {
        let (tx, mut rx) = mpsc::channel(2);
        assert_eq!(push_outbound(&tx, Bytes::from_static(b"a\n")), Ok(()));
        assert_eq!(push_outbound(&tx, Bytes::from_static(b"b\n")), Ok(()));
        assert_eq!(push_outbound(&tx, Bytes::from_static(b"c\n")), Err(Stalled));
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"a\n"));
        assert_eq!(push_outbound(&tx, Bytes::from_static(b"c\n")), Ok(()));
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"b\n"));
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"c\n"));
        drop(rx);
        assert_eq!(push_outbound(&tx, Bytes::from_static(b"d\n")), Ok(()), "a closed writer is a lost connection");
    }

    #[test]
    fn queued_chunks_leave_in_one_write_in_order() {
        let (tx, mut rx) = mpsc::channel(8);
        for chunk in [&b"b\n"[..], b"c\n", b"d\n"] {
            tx.try_send(Bytes::copy_from_slice(chunk)).unwrap();
        }
        let mut batch = Vec::new();
        assert_eq!(coalesce(Bytes::from_static(b"a\n"), &mut rx, &mut batch), 4);
        assert_eq!(batch, b"a\nb\nc\nd\n");
        assert!(rx.try_recv().is_err(), "the queue was drained");
        // A batch stops growing past its byte bound; the rest waits for the next write.
        let big = Bytes::from(vec![b'x'; WRITE_BATCH_BYTES]);
        tx.try_send(Bytes::from_static(b"e\n")).unwrap();
        assert_eq!(coalesce(big, &mut rx, &mut batch), 1);
        assert_eq!(batch.len(), WRITE_BATCH_BYTES);
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"e\n"));
    }
}
