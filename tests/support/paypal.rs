//! PayPal test kit: a CA of the test's own, certificates issued by it (the signing certificate
//! PayPal would serve, the certificate host's TLS identity), a local HTTPS certificate host that
//! counts every connection and request, and a signer that signs deliveries as PayPal does
//! (RSASSA-PKCS1-v1_5 with SHA-256 over `{id}|{time}|{webhook id}|{crc32 of the body}`).
//!
//! The signed string is built here on its own, from PayPal's description, not with the
//! gateway's function: a test that shared it could not catch a mistake in it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// RSA-2048 keys for signing certificates (ring cannot generate RSA keys, and PayPal signs with
/// RSA). Made for these tests with `openssl genpkey -algorithm RSA -pkeyopt
/// rsa_keygen_bits:2048`; nothing trusts them anywhere.
pub const SIGNING_KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\n\
MIIEvAIBADANBgkqhkiG9w0BAQEFAASCBKYwggSiAgEAAoIBAQCf/k84gpSZDi0g\n\
cOG57UwTrVxtRsDoZJI8insNKv+MbjOWojmlT3QU9MCr+elk1C4FMBKSBxI9Vs87\n\
HoqG9zvjEuWAlJZNibJNBwRYHbMKWeoHJ6LCnd9StHuA6sV1HmGK1WRqCHrSrRfW\n\
1vJixJwGwDMp6TbapmSeIf0OqkcyZ2z0pwr7IlbDl8De9ePJkpS+wgKRn3ymQgFD\n\
Md31yb21WnLNncmSgxnG4ErR+EVBf08oVAdZNwd1D9Hh22yaiZfWcia4uEXIGWek\n\
Xvfc9yIW74vKqVG5NdMHndT3oCpSHaMgzufCYaqRA6mnJt+r0e/yo9eeAyI4dMaY\n\
TTdsgFzBAgMBAAECggEABiXROPhpidUN3lqADfMkknf9nnRSyss8hEeE8W1Wyvhc\n\
Epxyrxu1t+1srt8IPRfbGdduSz6q0IESrvCePY/n9PJ/r5hmCx4wo/2SSOmBPPNW\n\
BwbanfRPhb/KJBrBUh4D/P/0nw9q2sgMa7SwNSPdY/QEM0bTFQVCRgJD1UmtOS5J\n\
I87yG5dkxi1r/0zCrCIwlMXisff/IOPAnt+gOKC9m1F5D46SGsGAM9RBdnlbl979\n\
6W2JYw/HZyT9zUZI/ir1hFGriw35AnU79r7svCPOgUioYMAfRrKgS//UghVN6Rh4\n\
b08fKhMA8/RCTNhL85UU5vmkfFAaIf3XZjJr4VaL8QKBgQDTck2HmwYHku2jK6ay\n\
opOVWy17bepJeWr0yryvQJu0v4q3YMSjuXEUpivUNI5cF+U+Dl7WkHhRuirfxLRr\n\
I2TAlpP03DGA6sbl+eMjjPLE8hVL+WvOBCpmlqnLhlGEV+hsQzN9TrmpDtppUCy+\n\
RlZuJojzx27AEvGbQ22AlWahGQKBgQDBtI9ZfRU7fJVCJcz/GLonRKD1c/+Af194\n\
+j/0dRahPNy7MYR5zz/sPSXiRc2HWCcJnL7zEVzXpAgzenCntM3nkA6ZEnrRUx53\n\
MnzmEhporEUMxN0J1nL89eitBNt4eGCegLyin44umRa/yGRbtaLmqVvg+IzDuoUj\n\
JOjbB4xF6QKBgFfAMgi6/0+ZXGHBNdcgvVrYkhGNVhPT/d1FXfTlPTlP3IOp9zFz\n\
PkixhbL1dLcne427bQRixGw2dKCVA8MK1z9Nvm16DFlSFeVPRUJ1tjKhvNDg3CqN\n\
dANLN4AtaBsiWGTFptK0HzzX2zClg0wb6Lah62gwNfgkZHxpCUK5vfPRAoGAPjg8\n\
T3dhKZFz9CJmPY54xQJDXXRcHq9LQHXJs0Ek+retAyf9sI7ErqJZl9vqD85eA7Vo\n\
lHUASHf09mwe4Y+vD/Fy7vJDpxc20vzRp6kq+HJVX6uggHd0yhJHIcRMpt6r0l3x\n\
uZ7csdUUvJemvNqUL9k4nQPZW0l/WHGTpj8/bHkCgYA95iT7ikCTDjmm5KJZrLqD\n\
uefsfnzmDnabuDFftwN3LSWumt7znCpeNSNFImRFonSabFK3hqz6zR662FnwDJER\n\
8rObyLk8lrVqBg2VXzSFnUA2NYLVzRa4RM/yBDwQ2UFO7tAcbVGIDpV1WF4S6H7Y\n\
QHVYOnJV8e9E+sKGgG4+YQ==\n\
-----END PRIVATE KEY-----\n";
pub const OTHER_SIGNING_KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\n\
MIIEvAIBADANBgkqhkiG9w0BAQEFAASCBKYwggSiAgEAAoIBAQCs0BxXhChABhMQ\n\
VVErrFYg1S7ql5+Ins4MArJi13kZ3pAtDjmhiPpEa81tiiSS5Oo5v3wCJiTYHCAl\n\
kutlt7EcXzHTDlXeUx+87N2jWCCX2sMzghZwFh49U9aOFRamO2MB5mNKi3GPzEQW\n\
GCU+ZjpYNSJQfrlLFWxhbO/JTSRzzp/LGGDbadxIfYIp+3RUs91Crb4RQcUaM9/6\n\
rVxRPJwG7QNidq2vZYEfjci1uiFqT/3E1VyB24Ip/lMtVBUwg0cM6JEUwlUzSg91\n\
ouRnhsWeoaFgZjKK6KlaaH06Skb++NY5A/OmJPZ5EZZysO+1TPUUBrJ9D1kC4N2K\n\
k2HKocSFAgMBAAECggEAT+W39M5pPZCRZ8/KQ4LeHzfxBQ0s+SFS6kKk7wXoO4mm\n\
5u3Yv1JxQwkEZUylNDUaBbD+SJASIMiAJF8U7mZLQG7Svl22XZ/Y4KQypL6t8wd1\n\
kG7oqNHREVGdtPsTCbATSmGWLnTiADXUlNJ9BaiF+Ro3zzeHu6sf/Ls88bj0zYVK\n\
UDIVqfDp5wG2Ry23b+xToPIu5mwGatyTWjCgD9ioNWx4QN/InMVsxB9FByisoqty\n\
cOpLexNLKEy0o7slDt6a67Hp5Yp7VOq+w6VTQ49kQF5QVhFS8+iFp7vMxfCAu/SC\n\
+mnM/wlI8yTSMbSToWqE4h5S8dyqaECBovgIlzEUUQKBgQDu8/CmnTyI/AyRpBaf\n\
EEj1qgPz1potk+Shd6xU5Pon5k3ql64/snHfQhtvZnWrSHLHqaJj+uGgE5YuvFb2\n\
CCgYKuJNmH+/C+GB92s/TYRh2Nf5fofbTbSC/BLMPzBfr5DbPHpbLClnv3X95jSN\n\
d357ZfnNfa2hffxCDKYHafFJOwKBgQC5JD00pkdiCLfuyrwwXaGFlDiCV1sjwEby\n\
E7dNYBZQ/xc5qeZTdDtvOfpmO5WJzoYlI03EZzgDlQoMTsomz+qhICrIcObTIDnq\n\
82tCeqzsPYlwSSIXhj1uLnfaq29IKfNLQnQbUzveyFyFvLjmZfiZRe76BEkLQZ2W\n\
XAQrLA5NPwKBgBeSZt34ytz0iEThu/2K/LeHQwaN1/3BBh/Lj2t8fxTqiisnNWBB\n\
OSx99/jgUaFI71G08TkNqa5B4GHR4H46xcHEkTh4X7m38VIB10mSWwnP+1Y4XiyL\n\
GNCHD0+ouBvoVNDbwXI3BAqg/4HBcNO3wvlnUOItkLBKnlThrIs0r0G7AoGAR7lH\n\
UNc9/jecchDuWNpdEa+7OJt4/l+l3HBQ6dPYsWYxbDBqv1ffEpbmb6aTpwBwLYEA\n\
xp6qL5EUhHIdlG2l2ufoSyCZ+56XcXL90ZJO3XJ1hR9/6pchw0aTPg5+HPnLfBNx\n\
gYh8QDFkzpavFurYJSDXlNoGJis0TqS1JLh7jecCgYAdNTgxc+cD5rfZ9klcstUa\n\
Q2byCpXqV6g/WMZbpm71uIk4YGn7Yb5WFHYqVVMejuLtJfLodCWhuuP1oX9UeQRg\n\
aYRwhuCq8AD3vQch0FpDq6ryZWI8/tF3zNc9pcymQZcIkOlFzFxjrn9/8PBn7djG\n\
ixkkkrZpJ3zL6pRQKNmeVA==\n\
-----END PRIVATE KEY-----\n";

/// The test's webhook id at "PayPal".
pub const WEBHOOK_ID: &str = "1TEST0WEBHOOK0ID";

/// A certificate authority of the test's own (ECDSA P-256, valid 1975 to 4096 as rcgen makes
/// it).
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A self-signed root.
    pub fn root(name: &str) -> Self {
        let issuer =
            CertifiedIssuer::self_signed(ca_params(name), KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    /// A CA under this one.
    pub fn intermediate(&self, name: &str) -> Self {
        let issuer =
            CertifiedIssuer::signed_by(ca_params(name), KeyPair::generate().unwrap(), &self.issuer)
                .unwrap();
        Self { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf for `names` (DNS names or IP addresses) with EKU serverAuth, as PayPal's signing
    /// certificate has, carrying `key`'s public key; `valid` is (not before, not after) when
    /// given, else 1975 to 4096. PEM.
    pub fn leaf(&self, key: &KeyPair, names: &[&str], valid: Option<(Ymd, Ymd)>) -> String {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if let Some((from, until)) = valid {
            params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
            params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
        }
        params.signed_by(key, &self.issuer).unwrap().pem()
    }

    /// A TLS server identity for `names`: its certificate followed by this CA's, and its key.
    pub fn server_identity(
        &self,
        names: &[&str],
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let pem = self.leaf(&key, names, None);
        let leaf = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let chain = vec![leaf, self.issuer.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (chain, key)
    }
}

impl TestCa {
    /// A TLS server identity for `names` as PEM: its certificate followed by this CA's, and
    /// its PKCS#8 key (for servers that read files, as PostgreSQL does).
    pub fn server_identity_pem(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let leaf = self.leaf(&key, names, None);
        (format!("{leaf}{}", self.pem()), key.serialize_pem())
    }
}

/// (year, month, day).
pub type Ymd = (i32, u8, u8);

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// The rcgen key of one of the PEM keys above.
pub fn rsa_key(pem: &str) -> KeyPair {
    KeyPair::from_pem(pem).unwrap()
}

/// What the certificate host answers on a path.
#[derive(Clone)]
pub enum Route {
    /// 200 with this body.
    Pem(String),
    /// This status, empty body.
    Status(u16),
    /// 302 to this location.
    Redirect(String),
    /// 200 with `bytes` of body, announced in Content-Length when `declared`, else chunked.
    Oversized { bytes: usize, declared: bool },
    /// Reads the request and never answers.
    Stall,
    /// Holds the request until `gate` is true, then answers `status` with an empty body.
    Held {
        gate: tokio::sync::watch::Receiver<bool>,
        status: u16,
    },
}

/// A local HTTPS certificate host on 127.0.0.1, counting connections (before TLS) and requests
/// per path.
pub struct CertServer {
    pub addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<HashMap<String, usize>>>,
    routes: Arc<Mutex<HashMap<String, Route>>>,
}

impl CertServer {
    /// Serves TLS with `identity` (see [`TestCa::server_identity`]); unknown paths are 404.
    pub async fn start(identity: (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(identity.0, identity.1)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Self {
            addr: listener.local_addr().unwrap(),
            connections: Arc::default(),
            requests: Arc::default(),
            routes: Arc::default(),
        };
        let (connections, requests, routes) = (
            server.connections.clone(),
            server.requests.clone(),
            server.routes.clone(),
        );
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, requests, routes) =
                    (acceptor.clone(), requests.clone(), routes.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    serve(tls, &requests, &routes).await;
                });
            }
        });
        server
    }

    pub fn route(&self, path: &str, route: Route) {
        self.routes.lock().unwrap().insert(path.to_owned(), route);
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// TCP connections accepted so far (a TLS handshake that failed counts too).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests received for `path` so far.
    pub fn requests(&self, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}

async fn serve<S>(
    mut stream: S,
    requests: &Mutex<HashMap<String, usize>>,
    routes: &Mutex<HashMap<String, Route>>,
) where
    S: AsyncReadExt + AsyncWriteExt + Unpin,
{
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head
        .lines()
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .unwrap_or("")
        .to_owned();
    *requests.lock().unwrap().entry(path.clone()).or_default() += 1;
    let route = routes.lock().unwrap().get(&path).cloned();
    let answer = |status: &str, headers: &str, body: &[u8]| {
        let mut out = format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    };
    match route {
        Some(Route::Pem(pem)) => {
            let out = answer(
                "200 OK",
                "Content-Type: application/x-pem-file\r\n",
                pem.as_bytes(),
            );
            let _ = stream.write_all(&out).await;
        }
        Some(Route::Status(code)) => {
            let _ = stream
                .write_all(&answer(&format!("{code} Status"), "", b""))
                .await;
        }
        Some(Route::Redirect(location)) => {
            let headers = format!("Location: {location}\r\n");
            let _ = stream.write_all(&answer("302 Found", &headers, b"")).await;
        }
        Some(Route::Oversized { bytes, declared }) => {
            let line = b"MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAxxxxxxxxxxxxxxxxxxxx\n";
            let head = if declared {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n")
            } else {
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".into()
            };
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut sent = 0;
            while sent < bytes {
                let piece = line.repeat(256);
                let piece = &piece[..piece.len().min(bytes - sent)];
                let written = if declared {
                    stream.write_all(piece).await
                } else {
                    let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                    chunk.extend_from_slice(piece);
                    chunk.extend_from_slice(b"\r\n");
                    stream.write_all(&chunk).await
                };
                // The client hung up once it had read enough: as it should.
                if written.is_err() {
                    return;
                }
                sent += piece.len();
            }
            if !declared {
                let _ = stream.write_all(b"0\r\n\r\n").await;
            }
        }
        Some(Route::Stall) => std::future::pending::<()>().await,
        Some(Route::Held { mut gate, status }) => {
            if gate.wait_for(|open| *open).await.is_err() {
                return;
            }
            let _ = stream
                .write_all(&answer(&format!("{status} Status"), "", b""))
                .await;
        }
        None => {
            let _ = stream.write_all(&answer("404 Not Found", "", b"")).await;
        }
    }
    let _ = stream.shutdown().await;
}

/// Signs deliveries as PayPal does, with one RSA key.
pub struct Signer {
    key: ring::signature::RsaKeyPair,
}

impl Signer {
    pub fn new(key_pem: &str) -> Self {
        let der = PrivatePkcs8KeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
        let key = ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).unwrap();
        Self { key }
    }

    /// The five PayPal headers of `body` sent at `sent`, naming `cert_url`.
    pub fn headers(
        &self,
        webhook_id: &str,
        cert_url: &str,
        body: &[u8],
        sent: DateTime<Utc>,
    ) -> Vec<(String, String)> {
        use base64::Engine as _;
        let id = uuid::Uuid::new_v4().to_string();
        let time = sent.format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let signed = format!("{id}|{time}|{webhook_id}|{}", crc32fast::hash(body));
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                signed.as_bytes(),
                &mut signature,
            )
            .unwrap();
        vec![
            ("PAYPAL-TRANSMISSION-ID".into(), id),
            ("PAYPAL-TRANSMISSION-TIME".into(), time),
            (
                "PAYPAL-TRANSMISSION-SIG".into(),
                base64::engine::general_purpose::STANDARD.encode(signature),
            ),
            ("PAYPAL-CERT-URL".into(), cert_url.into()),
            ("PAYPAL-AUTH-ALGO".into(), "SHA256withRSA".into()),
        ]
    }
}

/// `template` with its `{FILL}` replaced by 12 characters from `@ABC..O` chosen so that the
/// whole text's CRC-32 (IEEE, as PayPal signs it) is `target`: the forgery PayPal's scheme
/// allows, since CRC-32 is linear. Each filler character's low 4 bits are unknowns over GF(2);
/// flipping one changes the CRC by a fixed 32-bit difference, so the filler is a solution of 32
/// linear equations in 48 unknowns, found by elimination. `None` in the (unlikely) case the
/// differences do not span every target.
pub fn forge_crc32(template: &str, target: u32) -> Option<String> {
    const LEN: usize = 12;
    let (before, after) = template.split_once("{FILL}")?;
    let text = |filler: &[u8]| {
        let mut bytes = before.as_bytes().to_vec();
        bytes.extend_from_slice(filler);
        bytes.extend_from_slice(after.as_bytes());
        bytes
    };
    let base = [b'@'; LEN];
    let crc0 = crc32fast::hash(&text(&base));
    // pivots[b]: a combination of unknowns (bit j = unknown j) whose difference has top bit b.
    let mut pivots: [Option<(u32, u64)>; 32] = [None; 32];
    for j in 0..LEN * 4 {
        let mut flipped = base;
        flipped[j / 4] ^= 1 << (j % 4);
        let (mut diff, mut combo) = (crc32fast::hash(&text(&flipped)) ^ crc0, 1u64 << j);
        for bit in (0..32).rev() {
            if diff >> bit & 1 == 0 {
                continue;
            }
            match pivots[bit] {
                Some((d, c)) => {
                    diff ^= d;
                    combo ^= c;
                }
                None => {
                    pivots[bit] = Some((diff, combo));
                    break;
                }
            }
        }
    }
    let (mut want, mut combo) = (target ^ crc0, 0u64);
    for bit in (0..32).rev() {
        if want >> bit & 1 == 1 {
            let (d, c) = pivots[bit]?;
            want ^= d;
            combo ^= c;
        }
    }
    let mut filler = base;
    for j in 0..LEN * 4 {
        if combo >> j & 1 == 1 {
            filler[j / 4] ^= 1 << (j % 4);
        }
    }
    let forged = String::from_utf8(text(&filler)).ok()?;
    (crc32fast::hash(forged.as_bytes()) == target).then_some(forged)
}
