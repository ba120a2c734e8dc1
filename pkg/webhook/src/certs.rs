//! Self-managed certificates, the default: a CA and a serving certificate kept in a Secret, the
//! CA written into the orchestrator's own webhook configurations, the serving certificate rotated
//! before it expires. No openssl step for the user. Every replica converges on the same Secret:
//! writes carry its resourceVersion, and a loser reads the winner's certificates.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::tls::{CertResolver, certified_key};

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CERT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";

/// A serving certificate this close to expiry is replaced.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
const CA_VALIDITY_DAYS: i64 = 3650;
const SERVING_VALIDITY_DAYS: i64 = 365;
/// How far a new certificate's validity starts in the past.
const CLOCK_SKEW: time::Duration = time::Duration::hours(1);

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the stored certificate cannot be read: {0}")]
    Parse(String),
    #[error("serving the certificate: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("gave up after {0} conflicting writes")]
    Conflicts(u32),
}

/// Where the certificates live and who must trust them.
#[derive(Clone, Debug)]
pub struct SelfManaged {
    pub secret_namespace: String,
    pub secret_name: String,
    /// DNS names (or IP addresses) the serving certificate is valid for.
    pub hosts: Vec<String>,
    /// Name of the MutatingWebhookConfiguration and the ValidatingWebhookConfiguration whose
    /// webhooks get the CA bundle.
    pub webhook_configuration: String,
}

/// The PEM texts of a CA and of the serving certificate it signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    pub ca_cert: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
}

impl Bundle {
    /// A new CA and a serving certificate for `hosts`.
    pub fn generate(hosts: &[String]) -> Result<Bundle, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "di-orchestrator-webhook-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        valid_for(&mut params, CA_VALIDITY_DAYS);
        let ca_key = KeyPair::generate()?;
        let ca_cert = params.self_signed(&ca_key)?.pem();
        Self::with_ca(ca_cert, ca_key.serialize_pem(), hosts)
    }

    /// A new serving certificate for `hosts`, signed by an existing CA.
    pub fn with_ca(ca_cert: String, ca_key: String, hosts: &[String]) -> Result<Bundle, CertError> {
        let issuer = Issuer::from_ca_cert_pem(&ca_cert, KeyPair::from_pem(&ca_key)?)?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName(h.clone().try_into()?)),
            })
            .collect::<Result<_, rcgen::Error>>()?;
        params.distinguished_name.push(DnType::CommonName, hosts.first().cloned().unwrap_or_default());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        valid_for(&mut params, SERVING_VALIDITY_DAYS);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?.pem();
        Ok(Bundle { ca_cert, ca_key, cert, key: key.serialize_pem() })
    }

    fn from_secret(secret: &Secret) -> Option<Bundle> {
        let data = secret.data.as_ref()?;
        let get = |k: &str| data.get(k).and_then(|b| String::from_utf8(b.0.clone()).ok());
        Some(Bundle { ca_cert: get(CA_CERT)?, ca_key: get(CA_KEY)?, cert: get(TLS_CERT)?, key: get(TLS_KEY)? })
    }

    fn to_data(&self) -> BTreeMap<String, ByteString> {
        [(CA_CERT, &self.ca_cert), (CA_KEY, &self.ca_key), (TLS_CERT, &self.cert), (TLS_KEY, &self.key)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }
}

/// Makes `params` valid from now for `days`. The start is backdated by [`CLOCK_SKEW`], so a
/// peer whose clock is a little behind ours accepts a certificate issued a moment ago.
fn valid_for(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + time::Duration::days(days);
}

/// What to do with the stored bundle, if any, for `hosts` at `now` (seconds since the epoch).
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    Keep,
    /// The serving certificate expires soon or names other hosts: issue one from the same CA.
    ReissueServing,
    /// No usable CA: start over.
    NewCa,
}

pub fn renewal(bundle: Option<&Bundle>, hosts: &[String], now: i64) -> Renewal {
    let Some(bundle) = bundle else { return Renewal::NewCa };
    let renew_before = RENEW_BEFORE.as_secs() as i64;
    match expiry_and_hosts(&bundle.ca_cert) {
        Some((ca_expiry, _)) if ca_expiry - now > 2 * renew_before => {}
        _ => return Renewal::NewCa,
    }
    match expiry_and_hosts(&bundle.cert) {
        Some((expiry, names)) if expiry - now > renew_before && hosts.iter().all(|h| names.contains(h)) => {
            Renewal::Keep
        }
        _ => Renewal::ReissueServing,
    }
}

/// A certificate's notAfter (seconds since the epoch) and subject alternative names.
fn expiry_and_hosts(pem: &str) -> Option<(i64, Vec<String>)> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    let mut names = vec![];
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push(d.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                    let ip: Option<std::net::IpAddr> = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes).ok().map(Into::into),
                        16 => <[u8; 16]>::try_from(*bytes).ok().map(Into::into),
                        _ => None,
                    };
                    names.extend(ip.map(|i| i.to_string()));
                }
                _ => {}
            }
        }
    }
    Some((cert.validity().not_after.timestamp(), names))
}

fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Reads the Secret, creates or renews the certificates as needed, and returns what is stored.
pub async fn ensure(client: &Client, config: &SelfManaged) -> Result<Bundle, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.secret_namespace);
    const ATTEMPTS: u32 = 5;
    for _ in 0..ATTEMPTS {
        let existing = secrets.get_opt(&config.secret_name).await?;
        let stored = existing.as_ref().and_then(Bundle::from_secret);
        let bundle = match renewal(stored.as_ref(), &config.hosts, now_secs()) {
            Renewal::Keep => return Ok(stored.expect("Keep implies a stored bundle")),
            Renewal::ReissueServing => {
                let stored = stored.expect("ReissueServing implies a stored bundle");
                Bundle::with_ca(stored.ca_cert, stored.ca_key, &config.hosts)?
            }
            Renewal::NewCa => Bundle::generate(&config.hosts)?,
        };
        let written = match existing {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(config.secret_name.clone()),
                        labels: Some([("app.kubernetes.io/name".to_string(), "di-orchestrator".to_string())].into()),
                        ..Default::default()
                    },
                    type_: Some("kubernetes.io/tls".into()),
                    data: Some(bundle.to_data()),
                    ..Default::default()
                };
                secrets.create(&PostParams::default(), &secret).await
            }
            Some(mut secret) => {
                secret.data = Some(bundle.to_data());
                secrets.replace(&config.secret_name, &PostParams::default(), &secret).await
            }
        };
        match written {
            Ok(_) => {
                info!(secret = %config.secret_name, "wrote the webhook's certificates");
                return Ok(bundle);
            }
            // Another replica wrote first: read what it wrote.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CertError::Conflicts(ATTEMPTS))
}

/// Writes the CA into every webhook of the orchestrator's webhook configurations.
pub async fn inject_ca_bundle(client: &Client, config: &SelfManaged, ca_pem: &str) -> Result<(), CertError> {
    let bundle = ByteString(ca_pem.as_bytes().to_vec());
    let name = &config.webhook_configuration;
    set_ca_bundle(Api::<MutatingWebhookConfiguration>::all(client.clone()), name, &bundle, |c| {
        c.webhooks.iter_mut().flatten().map(|w| &mut w.client_config).collect()
    })
    .await?;
    set_ca_bundle(Api::<ValidatingWebhookConfiguration>::all(client.clone()), name, &bundle, |c| {
        c.webhooks.iter_mut().flatten().map(|w| &mut w.client_config).collect()
    })
    .await
}

/// Sets `bundle` on every client config of the webhook configuration `name`, if it exists.
async fn set_ca_bundle<K>(
    api: Api<K>,
    name: &str,
    bundle: &ByteString,
    client_configs: impl Fn(&mut K) -> Vec<&mut WebhookClientConfig>,
) -> Result<(), CertError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    for _ in 0..5 {
        let Some(mut current) = api.get_opt(name).await? else { return Ok(()) };
        let mut configs = client_configs(&mut current);
        if configs.iter().all(|c| c.ca_bundle.as_ref() == Some(bundle)) {
            return Ok(());
        }
        configs.iter_mut().for_each(|c| c.ca_bundle = Some(bundle.clone()));
        match api.replace(name, &PostParams::default(), &current).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CertError::Conflicts(5))
}

/// Sets up the certificates, then keeps them fresh: checks hourly, rotates before expiry, and
/// serves and publishes whatever the Secret holds (another replica may have rotated it).
pub async fn start(
    client: Client,
    config: SelfManaged,
) -> Result<(Arc<CertResolver>, impl std::future::Future<Output = ()>), CertError> {
    let bundle = ensure(&client, &config).await?;
    inject_ca_bundle(&client, &config, &bundle.ca_cert).await?;
    let resolver = CertResolver::new(certified_key(bundle.cert.as_bytes(), bundle.key.as_bytes())?);
    let served = resolver.clone();
    let refresh = async move {
        let mut current = bundle;
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            let next = match ensure(&client, &config).await {
                Ok(b) => b,
                Err(e) => {
                    warn!("renewing the webhook certificates: {e}");
                    continue;
                }
            };
            if next == current {
                continue;
            }
            match certified_key(next.cert.as_bytes(), next.key.as_bytes()) {
                Ok(key) => served.set(key),
                Err(e) => warn!("serving the renewed certificate: {e}"),
            }
            if let Err(e) = inject_ca_bundle(&client, &config, &next.ca_cert).await {
                warn!("publishing the renewed CA: {e}");
            }
            current = next;
        }
    };
    Ok((resolver, refresh))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Vec<String> {
        vec!["di-orchestrator-webhook.di-system.svc".into(), "127.0.0.1".into()]
    }

    #[test]
    fn a_fresh_bundle_is_kept_and_names_its_hosts() {
        let bundle = Bundle::generate(&hosts()).unwrap();
        let (expiry, names) = expiry_and_hosts(&bundle.cert).unwrap();
        assert_eq!(names, hosts());
        let year = 365 * 86_400;
        assert!((expiry - now_secs() - year).abs() < 86_400, "valid for a year");
        assert_eq!(renewal(Some(&bundle), &hosts(), now_secs()), Renewal::Keep);
        certified_key(bundle.cert.as_bytes(), bundle.key.as_bytes()).expect("rustls serves it");
    }

    /// A certificate's notBefore and notAfter, in seconds since the epoch.
    fn validity(pem: &str) -> (i64, i64) {
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        (cert.validity().not_before.timestamp(), cert.validity().not_after.timestamp())
    }

    #[test]
    fn certificates_are_valid_from_now_for_their_days() {
        let before = now_secs();
        let bundle = Bundle::generate(&hosts()).unwrap();
        let after = now_secs() + 1;
        let skew = CLOCK_SKEW.whole_seconds();
        for (pem, days) in [(&bundle.ca_cert, CA_VALIDITY_DAYS), (&bundle.cert, SERVING_VALIDITY_DAYS)] {
            let (not_before, not_after) = validity(pem);
            assert!((before - skew..=after - skew).contains(&not_before), "{not_before} is not now less {skew} s");
            let end = days * 86_400;
            assert!((before + end..=after + end).contains(&not_after), "{not_after} is not {days} days from now");
        }
    }

    #[test]
    fn renewal_decisions() {
        let bundle = Bundle::generate(&hosts()).unwrap();
        assert_eq!(renewal(None, &hosts(), now_secs()), Renewal::NewCa);
        // Within 30 days of the serving certificate's expiry.
        let late = now_secs() + 340 * 86_400;
        assert_eq!(renewal(Some(&bundle), &hosts(), late), Renewal::ReissueServing);
        // A host the certificate does not name.
        let more = [hosts(), vec!["other.svc".into()]].concat();
        assert_eq!(renewal(Some(&bundle), &more, now_secs()), Renewal::ReissueServing);
        // The CA itself near its end.
        assert_eq!(renewal(Some(&bundle), &hosts(), now_secs() + 3640 * 86_400), Renewal::NewCa);
        let garbage = Bundle { cert: "not a certificate".into(), ..bundle.clone() };
        assert_eq!(renewal(Some(&garbage), &hosts(), now_secs()), Renewal::ReissueServing);
    }

    #[test]
    fn reissued_certificates_keep_the_ca() {
        let first = Bundle::generate(&hosts()).unwrap();
        let second = Bundle::with_ca(first.ca_cert.clone(), first.ca_key.clone(), &hosts()).unwrap();
        assert_eq!(second.ca_cert, first.ca_cert);
        assert_ne!(second.cert, first.cert);
    }
}
