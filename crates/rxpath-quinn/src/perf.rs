//! quinn's perf protocol (`perf` in quinn's repository), server and client.
//!
//! ALPN `perf`. On every stream the client opens, it writes the size of the
//! response it wants as 8 bytes big-endian, then whatever it uploads, and
//! finishes the stream; the server reads the size, drains the upload, and
//! answers with that many bytes: on the same stream for a bidirectional
//! one, on a unidirectional stream it opens for a unidirectional one.

use anyhow::{anyhow, Context as _, Result};
use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The perf protocol's ALPN.
pub const ALPN: &[u8] = b"perf";

/// What a perf server did, for its report.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted (handshakes completed).
    pub connections: AtomicU64,
    /// Streams answered.
    pub streams: AtomicU64,
    /// Bytes uploaded to the server (stream payload after the size).
    pub bytes_in: AtomicU64,
    /// Bytes the server sent in responses.
    pub bytes_out: AtomicU64,
    /// Streams that failed (reset, connection lost).
    pub failed: AtomicU64,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server config with a self-signed certificate for `localhost`, made
/// now, and ALPN `perf`; the certificate, for clients to trust.
pub fn self_signed_server() -> Result<(quinn::ServerConfig, CertificateDer<'static>)> {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()])
        .context("making a self-signed certificate")?;
    let der = CertificateDer::from(cert.cert);
    let key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
    let mut crypto = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key)?;
    crypto.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = Arc::new(QuicServerConfig::try_from(crypto)?);
    Ok((quinn::ServerConfig::with_crypto(crypto), der))
}

/// A client config that trusts `cert` and speaks `perf`.
pub fn client_trusting(cert: CertificateDer<'static>) -> Result<quinn::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let mut crypto = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    crypto.alpn_protocols = vec![ALPN.to_vec()];
    Ok(quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(crypto)?,
    )))
}

/// Serve the perf protocol on every connection `endpoint` accepts, until
/// it is closed.
pub async fn serve(endpoint: quinn::Endpoint, stats: Arc<ServerStats>) {
    while let Some(incoming) = endpoint.accept().await {
        let stats = stats.clone();
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else {
                return;
            };
            stats.connections.fetch_add(1, Ordering::Relaxed);
            let (c2, s2) = (conn.clone(), stats.clone());
            let uni = tokio::spawn(async move {
                while let Ok(recv) = c2.accept_uni().await {
                    let (c3, s3) = (c2.clone(), s2.clone());
                    tokio::spawn(async move {
                        let r = async {
                            let n = read_request(recv, &s3).await?;
                            let send = c3.open_uni().await?;
                            respond(send, n, &s3).await
                        };
                        if r.await.is_err() {
                            s3.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            });
            while let Ok((send, recv)) = conn.accept_bi().await {
                let s2 = stats.clone();
                tokio::spawn(async move {
                    let r = async {
                        let n = read_request(recv, &s2).await?;
                        respond(send, n, &s2).await
                    };
                    if r.await.is_err() {
                        s2.failed.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            uni.abort();
        });
    }
}

/// The requested size, then the upload drained.
async fn read_request(mut recv: quinn::RecvStream, stats: &ServerStats) -> Result<u64> {
    let mut size = [0u8; 8];
    recv.read_exact(&mut size)
        .await
        .context("reading request")?;
    let mut bufs: [Bytes; 32] = Default::default();
    while let Some(n) = recv.read_chunks(&mut bufs).await? {
        let bytes: usize = bufs[..n].iter().map(|b| b.len()).sum();
        stats.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    Ok(u64::from_be_bytes(size))
}

static DATA: [u8; 1 << 20] = [42; 1 << 20];

async fn respond(mut send: quinn::SendStream, mut n: u64, stats: &ServerStats) -> Result<()> {
    while n > 0 {
        let chunk = n.min(DATA.len() as u64) as usize;
        send.write_chunk(Bytes::from_static(&DATA[..chunk])).await?;
        stats.bytes_out.fetch_add(chunk as u64, Ordering::Relaxed);
        n -= chunk as u64;
    }
    send.finish()?;
    stats.streams.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// One perf request on a new bidirectional stream: upload `up` bytes, ask
/// for `down`; returns the bytes received, which must equal `down`.
pub async fn request(conn: &quinn::Connection, up: u64, down: u64) -> Result<u64> {
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(&down.to_be_bytes()).await?;
    let mut left = up;
    while left > 0 {
        let chunk = left.min(DATA.len() as u64) as usize;
        send.write_chunk(Bytes::from_static(&DATA[..chunk])).await?;
        left -= chunk as u64;
    }
    send.finish()?;
    let mut got = 0u64;
    let mut bufs: [Bytes; 32] = Default::default();
    while let Some(n) = recv.read_chunks(&mut bufs).await? {
        got += bufs[..n].iter().map(|b| b.len() as u64).sum::<u64>();
    }
    if got != down {
        return Err(anyhow!("asked for {down} bytes, received {got}"));
    }
    Ok(got)
}

/// A client config that accepts any server certificate (perf servers make
/// theirs at start, as quinn's perf client's `--insecure`): for
/// measurements on a test network only.
pub fn client_insecure() -> Result<quinn::ClientConfig> {
    let p = provider();
    let mut crypto = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(p)))
        .with_no_client_auth();
    crypto.alpn_protocols = vec![ALPN.to_vec()];
    Ok(quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(crypto)?,
    )))
}

/// Accepts any certificate; signatures are still checked.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
