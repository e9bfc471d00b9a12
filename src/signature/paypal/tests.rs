//! Known-answer tests from PayPal's own SDK vector, and the offline checks (headers, time,
//! settings). The network half (fetching, TLS, redirects, sizes, the cache under load) is in
//! `tests/api/paypal_verify.rs`, against a local HTTPS server with a CA of its own.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha256};

use super::certificate::check_signature as leaf_check;
use super::*;

/// The signature check as a delivery meets it.
fn check_signature(
    leaf: &CertificateDer<'_>,
    message: &[u8],
    signature: &[u8],
) -> Result<(), SignatureError> {
    leaf_check(leaf, message, signature).map_err(bad_signature)
}

// Source: paypal/PayPal-Java-SDK rest-api-sdk/src/test/java/com/paypal/base/ValidateCertTest.java
// with src/test/resources/testClientCert.crt (vector "paypal-billing-plan-created" of
// fixtures/providers/vectors.json, recomputed when it was stored).
const WEBHOOK_ID: &str = "96605875FF6516633";
const TRANSMISSION_ID_VALUE: &str = "071f7d20-1584-11e7-abf0-6b62a8a99ac4";
const TRANSMISSION_TIME_VALUE: &str = "2017-03-30T20:04:05Z";
const SIGNATURE_B64: &str = "aBjgm5/xljRYu3G64Q0axISrP2xcy7WbW1u4UTCKnQvyprOZ1a1BBmqn2Jdr6ce8E76I3Ti/AL9y4VYSHyGSEaoE6dVQcCDebLbOXLH0fjTAbTc1/rmfdWmsk0DPltW84Y8W8jOHe3CLWDOwg5zmozyt+AceG2x5eOiw7mLSycaEoj/5RG+dOIWXnmWcLEArbG3VFshy0wuhZrKuGa9C/bD4Ku+Y9gK7Bv5I5IuGRVnTGpcFnVG0KxOyJxccLGyBVCIUMY5IZS7LkmJszQ3HZZFDTNihvgJHECSLwLhzUaysIye5G6CbbLdtAmeeb6wiDciEAvr2dFf+SplOR4Lrng==";
const CERT_URL_VALUE: &str = "https://api.sandbox.paypal.com/v1/notifications/test";
const SIGNED_STRING: &str =
    "071f7d20-1584-11e7-abf0-6b62a8a99ac4|2017-03-30T20:04:05Z|96605875FF6516633|3494065244";
const BODY: &str = r#"{"id":"WH-2MW4820926242972J-6SG447389E205703U","event_version":"1.0","create_time":"2017-03-30T20:04:05.613Z","resource_type":"plan","event_type":"BILLING.PLAN.CREATED","summary":"A billing plan was created","resource":{"merchant_preferences":{"setup_fee":{"currency":"USD","value":"1"},"return_url":"https://www.mta.org/wp-content/plugins/AMS/api/Paypal/paypal/rest-api-sdk-php/sample/billing/ExecuteAgreement.php?success=true","cancel_url":"https://www.mta.org/wp-content/plugins/AMS/api/Paypal/paypal/rest-api-sdk-php/sample/billing/ExecuteAgreement.php?success=false","auto_bill_amount":"YES","initial_fail_amount_action":"CONTINUE","max_fail_attempts":"0"},"update_time":"2017-03-30T20:04:05.587Z","create_time":"2017-03-30T20:04:05.587Z","name":"T-Shirt of the Month Club Plan","description":"Template creation.","links":[{"href":"api.sandbox.paypal.com/v1/payments/billing-plans/P-2U911356NH683973BEDIWKUY","rel":"self","method":"GET"}],"payment_definitions":[{"name":"Regular Payments","type":"REGULAR","frequency":"Month","frequency_interval":"2","amount":{"currency":"USD","value":"100"},"cycles":"12","charge_models":[{"type":"SHIPPING","amount":{"currency":"USD","value":"10"},"id":"CHM-6H655806YS685182XEDIWKUY"}],"id":"PD-5N450756VM995270VEDIWKUY"}],"id":"P-2U911356NH683973BEDIWKUY","state":"CREATED","type":"FIXED"},"links":[{"href":"https://api.sandbox.paypal.com/v1/notifications/webhooks-events/WH-2MW4820926242972J-6SG447389E205703U","rel":"self","method":"GET"},{"href":"https://api.sandbox.paypal.com/v1/notifications/webhooks-events/WH-2MW4820926242972J-6SG447389E205703U/resend","rel":"resend","method":"POST"}]}"#;
/// messageverificationcerts.sandbox.paypal.com, issued by DigiCert SHA2 Extended Validation
/// Server CA, valid 2017-02-18 to 2019-04-26T12:00:00Z (expired).
const VECTOR_CERT_PEM: &str = "-----BEGIN CERTIFICATE-----\n\
MIIILDCCBxSgAwIBAgIQDEd6EXcAnHmtnx4u7tJZlTANBgkqhkiG9w0BAQsFADB1\n\
MQswCQYDVQQGEwJVUzEVMBMGA1UEChMMRGlnaUNlcnQgSW5jMRkwFwYDVQQLExB3\n\
d3cuZGlnaWNlcnQuY29tMTQwMgYDVQQDEytEaWdpQ2VydCBTSEEyIEV4dGVuZGVk\n\
IFZhbGlkYXRpb24gU2VydmVyIENBMB4XDTE3MDIxODAwMDAwMFoXDTE5MDQyNjEy\n\
MDAwMFowggElMR0wGwYDVQQPDBRQcml2YXRlIE9yZ2FuaXphdGlvbjETMBEGCysG\n\
AQQBgjc8AgEDEwJVUzEZMBcGCysGAQQBgjc8AgECEwhEZWxhd2FyZTEQMA4GA1UE\n\
BRMHMzAxNDI2NzEWMBQGA1UECRMNMjIxMSBOIDFzdCBTdDEOMAwGA1UEERMFOTUx\n\
MzExCzAJBgNVBAYTAlVTMRMwEQYDVQQIEwpDYWxpZm9ybmlhMREwDwYDVQQHEwhT\n\
YW4gSm9zZTEVMBMGA1UEChMMUGF5UGFsLCBJbmMuMRgwFgYDVQQLEw9QYXJ0bmVy\n\
IFN1cHBvcnQxNDAyBgNVBAMTK21lc3NhZ2V2ZXJpZmljYXRpb25jZXJ0cy5zYW5k\n\
Ym94LnBheXBhbC5jb20wggEiMA0GCSqGSIb3DQEBAQUAA4IBDwAwggEKAoIBAQDT\n\
AsLQcHFGG0mvLNAlu3FJ/6QUr1EbUSBYnqF/oRbirzJRWbT3JWpFr2palaFNnfpC\n\
wLB/KY+UX3xDLB5Ic38piG6FzRe1TiZcxhdIbOY21OvVVFatXfM62lzwX3RASpbV\n\
A1cbCoDBSbgyplSPINVd8Gyf+qtJxbW7M6cVuZae1Nx0mA63SfNnRpBwOvYAUkCr\n\
uCCjIVLqRuWbRzn0wvayVMWasw047rHhtFmaYBwJ1L4sn5NL+HDQ5wSMb1EE46v/\n\
aGGdv7bcHhc4Re0C1pFW032MVb85eRD7OtvD2hZM2O5JwiwHMBXzxEjrIbGCA6be\n\
3acmzYKxYLZHYt6KlQDBAgMBAAGjggQEMIIEADAfBgNVHSMEGDAWgBQ901Cl1qCt\n\
7vNKYApl0yHU+PjWDzAdBgNVHQ4EFgQUgPw27mYvKgltHUaTXExjogwMhv8wNgYD\n\
VR0RBC8wLYIrbWVzc2FnZXZlcmlmaWNhdGlvbmNlcnRzLnNhbmRib3gucGF5cGFs\n\
LmNvbTAOBgNVHQ8BAf8EBAMCBaAwHQYDVR0lBBYwFAYIKwYBBQUHAwEGCCsGAQUF\n\
BwMCMHUGA1UdHwRuMGwwNKAyoDCGLmh0dHA6Ly9jcmwzLmRpZ2ljZXJ0LmNvbS9z\n\
aGEyLWV2LXNlcnZlci1nMS5jcmwwNKAyoDCGLmh0dHA6Ly9jcmw0LmRpZ2ljZXJ0\n\
LmNvbS9zaGEyLWV2LXNlcnZlci1nMS5jcmwwSwYDVR0gBEQwQjA3BglghkgBhv1s\n\
AgEwKjAoBggrBgEFBQcCARYcaHR0cHM6Ly93d3cuZGlnaWNlcnQuY29tL0NQUzAH\n\
BgVngQwBATCBiAYIKwYBBQUHAQEEfDB6MCQGCCsGAQUFBzABhhhodHRwOi8vb2Nz\n\
cC5kaWdpY2VydC5jb20wUgYIKwYBBQUHMAKGRmh0dHA6Ly9jYWNlcnRzLmRpZ2lj\n\
ZXJ0LmNvbS9EaWdpQ2VydFNIQTJFeHRlbmRlZFZhbGlkYXRpb25TZXJ2ZXJDQS5j\n\
cnQwDAYDVR0TAQH/BAIwADCCAfgGCisGAQQB1nkCBAIEggHoBIIB5AHiAHYApLkJ\n\
kLQYWBSHuxOizGdwCjw1mAT5G9+443fNDsgN3BAAAAFaTqxLiAAABAMARzBFAiEA\n\
pDFqvEjdtugwxjKvZqJ1Y1A1F1UX9EIvZL5Ar02YSe4CIBEf0EzZiic7u3IzI8BU\n\
y0oFKh11VL1YIBAZfIj744o/AHYAVhQGmi/XwuzT9eG9RLI+x0Z2ubyZEVzA75SY\n\
VdaJ0N0AAAFaTqxM2wAABAMARzBFAiEAn3lwWc95wltvaOnBaM09VQN9xhHHkwec\n\
w5+tdHhSimgCIC1BaJ0RodgykU0ii2QzuzEoR8ci6qF+Pj6j1GE5wvU4AHcA7ku9\n\
t3XOYLrhQmkfq+GeZqMPfl+wctiDAMR7iXqo/csAAAFaTqxOhwAABAMASDBGAiEA\n\
/+kyQku3N/kwrubEfHSM4h20mZTvrAoRZovA5qwpVLICIQDyOQQu9r6kets5tO0b\n\
YDXmaVWypOdS/ocseU11p5vBYAB3ALvZ37wfinG1k5Qjl6qSe0c4V5UKq1LoGpCW\n\
ZDaOHtGFAAABWk6sTEUAAAQDAEgwRgIhALIDDduHsT0LymHxdrOWzzEaDLhVSl5i\n\
vHAgWBcdl5AAAiEAgIYoXQHtSAiPyH4METNmAZAhiwo9uwTavdrjLsFJ2nowDQYJ\n\
KoZIhvcNAQELBQADggEBAMxgCr0MTAbu7aE8ryfK3q8grN4rJOzBBzh8tSKYW4PU\n\
FhAc6ZaW2/PNV+H8oYOP3nB28neglNjR/XZCyd7IRJoxSfwzUZhOBAzTFP0sp5Cu\n\
GZN24j2SrxcKCaq3mszLmwgiRzuDUnRFdI2OHep6EcDelfURGz8w6eTaLw7m3FZr\n\
gJSmmAOntirVZeVPLou74ykxWUm0kEi/OxNQWlgAlAHUcGZHpcupddK/dNRmCFSw\n\
RBeiGwaLsz2SXYNvTs4it8cisAxTwBD1iqyXEKRSx6HpsmIOznwENimrR8Cz3jtz\n\
QJmshPGmEbrpkKaJ7/DJO5EuMKFF6jYKjKiORugFKfU=\n\
-----END CERTIFICATE-----";

// The vector certificate's issuer chain, which the vector leaves out. Public CA certificates as
// DigiCert publishes them (https://cacerts.digicert.com/DigiCertSHA2ExtendedValidationServerCA.crt
// and .../DigiCertHighAssuranceEVRootCA.crt, here in PEM); the SHA-256 fingerprints below are
// DigiCert's, checked by `the_digicert_certificates_are_the_published_ones`.
const DIGICERT_EV_INTERMEDIATE_PEM: &str = "-----BEGIN CERTIFICATE-----\n\
MIIEtjCCA56gAwIBAgIQDHmpRLCMEZUgkmFf4msdgzANBgkqhkiG9w0BAQsFADBs\n\
MQswCQYDVQQGEwJVUzEVMBMGA1UEChMMRGlnaUNlcnQgSW5jMRkwFwYDVQQLExB3\n\
d3cuZGlnaWNlcnQuY29tMSswKQYDVQQDEyJEaWdpQ2VydCBIaWdoIEFzc3VyYW5j\n\
ZSBFViBSb290IENBMB4XDTEzMTAyMjEyMDAwMFoXDTI4MTAyMjEyMDAwMFowdTEL\n\
MAkGA1UEBhMCVVMxFTATBgNVBAoTDERpZ2lDZXJ0IEluYzEZMBcGA1UECxMQd3d3\n\
LmRpZ2ljZXJ0LmNvbTE0MDIGA1UEAxMrRGlnaUNlcnQgU0hBMiBFeHRlbmRlZCBW\n\
YWxpZGF0aW9uIFNlcnZlciBDQTCCASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoC\n\
ggEBANdTpARR+JmmFkhLZyeqk0nQOe0MsLAAh/FnKIaFjI5j2ryxQDji0/XspQUY\n\
uD0+xZkXMuwYjPrxDKZkIYXLBxA0sFKIKx9om9KxjxKws9LniB8f7zh3VFNfgHk/\n\
LhqqqB5LKw2rt2O5Nbd9FLxZS99RStKh4gzikIKHaq7q12TWmFXo/a8aUGxUvBHy\n\
/Urynbt/DvTVvo4WiRJV2MBxNO723C3sxIclho3YIeSwTQyJ3DkmF93215SF2AQh\n\
cJ1vb/9cuhnhRctWVyh+HA1BV6q3uCe7seT6Ku8hI3UarS2bhjWMnHe1c63YlC3k\n\
8wyd7sFOYn4XwHGeLN7x+RAoGTMCAwEAAaOCAUkwggFFMBIGA1UdEwEB/wQIMAYB\n\
Af8CAQAwDgYDVR0PAQH/BAQDAgGGMB0GA1UdJQQWMBQGCCsGAQUFBwMBBggrBgEF\n\
BQcDAjA0BggrBgEFBQcBAQQoMCYwJAYIKwYBBQUHMAGGGGh0dHA6Ly9vY3NwLmRp\n\
Z2ljZXJ0LmNvbTBLBgNVHR8ERDBCMECgPqA8hjpodHRwOi8vY3JsNC5kaWdpY2Vy\n\
dC5jb20vRGlnaUNlcnRIaWdoQXNzdXJhbmNlRVZSb290Q0EuY3JsMD0GA1UdIAQ2\n\
MDQwMgYEVR0gADAqMCgGCCsGAQUFBwIBFhxodHRwczovL3d3dy5kaWdpY2VydC5j\n\
b20vQ1BTMB0GA1UdDgQWBBQ901Cl1qCt7vNKYApl0yHU+PjWDzAfBgNVHSMEGDAW\n\
gBSxPsNpA/i/RwHUmCYaCALvY2QrwzANBgkqhkiG9w0BAQsFAAOCAQEAnbbQkIbh\n\
hgLtxaDwNBx0wY12zIYKqPBKikLWP8ipTa18CK3mtlC4ohpNiAexKSHc59rGPCHg\n\
4xFJcKx6HQGkyhE6V6t9VypAdP3THYUYUN9XR3WhfVUgLkc3UHKMf4Ib0mKPLQNa\n\
2sPIoc4sUqIAY+tzunHISScjl2SFnjgOrWNoPLpSgVh5oywM395t6zHyuqB8bPEs\n\
1OG9d4Q3A84ytciagRpKkk47RpqF/oOi+Z6Mo8wNXrM9zwR4jxQUezKcxwCmXMS1\n\
oVWNWlZopCJwqjyBcdmdqEU79OX2olHdx3ti6G8MdOu42vi/hw15UJGQmxg7kVkn\n\
8TUoE6smftX3eg==\n\
-----END CERTIFICATE-----";
const DIGICERT_EV_INTERMEDIATE_SHA256: &str =
    "403e062a2653059113285baf80a0d4ae422c848c9f78fad01fc94bc5b87fef1a";
/// DigiCert High Assurance EV Root CA (2006 to 2031). Not in webpki-roots 1.0 (Mozilla no
/// longer trusts it for TLS), so the vector's chain verifies only with it as an extra root.
const DIGICERT_EV_ROOT_PEM: &str = "-----BEGIN CERTIFICATE-----\n\
MIIDxTCCAq2gAwIBAgIQAqxcJmoLQJuPC3nyrkYldzANBgkqhkiG9w0BAQUFADBs\n\
MQswCQYDVQQGEwJVUzEVMBMGA1UEChMMRGlnaUNlcnQgSW5jMRkwFwYDVQQLExB3\n\
d3cuZGlnaWNlcnQuY29tMSswKQYDVQQDEyJEaWdpQ2VydCBIaWdoIEFzc3VyYW5j\n\
ZSBFViBSb290IENBMB4XDTA2MTExMDAwMDAwMFoXDTMxMTExMDAwMDAwMFowbDEL\n\
MAkGA1UEBhMCVVMxFTATBgNVBAoTDERpZ2lDZXJ0IEluYzEZMBcGA1UECxMQd3d3\n\
LmRpZ2ljZXJ0LmNvbTErMCkGA1UEAxMiRGlnaUNlcnQgSGlnaCBBc3N1cmFuY2Ug\n\
RVYgUm9vdCBDQTCCASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoCggEBAMbM5XPm\n\
+9S75S0tMqbf5YE/yc0lSbZxKsPVlDRnogocsF9ppkCxxLeyj9CYpKlBWTrT3JTW\n\
PNt0OKRKzE0lgvdKpVMSOO7zSW1xkX5jtqumX8OkhPhPYlG++MXs2ziS4wblCJEM\n\
xChBVfvLWokVfnHoNb9Ncgk9vjo4UFt3MRuNs8ckRZqnrG0AFFoEt7oT61EKmEFB\n\
Ik5lYYeBQVCmeVyJ3hlKV9Uu5l0cUyx+mM0aBhakaHPQNAQTXKFx01p8VdteZOE3\n\
hzBWBOURtCmAEvF5OYiiAhF8J2a3iLd48soKqDirCmTCv2ZdlYTBoSUeh10aUAsg\n\
EsxBu24LUTi4S8sCAwEAAaNjMGEwDgYDVR0PAQH/BAQDAgGGMA8GA1UdEwEB/wQF\n\
MAMBAf8wHQYDVR0OBBYEFLE+w2kD+L9HAdSYJhoIAu9jZCvDMB8GA1UdIwQYMBaA\n\
FLE+w2kD+L9HAdSYJhoIAu9jZCvDMA0GCSqGSIb3DQEBBQUAA4IBAQAcGgaX3Nec\n\
nzyIZgYIVyHbIUf4KmeqvxgydkAQV8GK83rZEWWONfqe/EW1ntlMMUu4kehDLI6z\n\
eM7b41N5cdblIZQB2lWHmiRk9opmzN6cN82oNLFpmyPInngiK3BD41VHMWEZ71jF\n\
hS9OMPagMRYjyOfiZRYzy78aG6A9+MpeizGLYAiJLQwGXFK3xPkKmNEVX58Svnw2\n\
Yzi9RKR/5CYrCsSXaQ3pjOLAEFe4yHYSkVXySGnYvCoCWw9E1CAx2/S6cCZdkGCe\n\
vEsXCS+0yx5DaMkHJ8HSXPfqIbloEpw8nL+e/IBcm2PN7EeqJSdnoDfzAIJ9VNep\n\
+OkuE6N36B9K\n\
-----END CERTIFICATE-----";
const DIGICERT_EV_ROOT_SHA256: &str =
    "7431e5f4c3c1ce4690774f0b61e05440883ba9a01ed00ba6abd7806ed3b118cf";

fn vector_headers() -> Vec<(String, String)> {
    vec![
        (
            "PAYPAL-TRANSMISSION-ID".into(),
            TRANSMISSION_ID_VALUE.into(),
        ),
        (
            "PAYPAL-TRANSMISSION-TIME".into(),
            TRANSMISSION_TIME_VALUE.into(),
        ),
        ("PAYPAL-TRANSMISSION-SIG".into(), SIGNATURE_B64.into()),
        ("PAYPAL-AUTH-ALGO".into(), "SHA256withRSA".into()),
        ("PAYPAL-CERT-URL".into(), CERT_URL_VALUE.into()),
    ]
}

fn with_header(name: &str, value: Option<&str>) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = vector_headers()
        .into_iter()
        .filter(|(n, _)| n != name)
        .collect();
    if let Some(value) = value {
        headers.push((name.to_owned(), value.to_owned()));
    }
    headers
}

fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .with_timezone(&Utc)
}

/// A minute after the vector was sent: inside its certificate's validity.
fn vector_now() -> DateTime<Utc> {
    at("2017-03-30T20:05:05Z")
}

fn chain_of(pems: &[&str]) -> Vec<CertificateDer<'static>> {
    pems.iter()
        .flat_map(|pem| {
            CertificateDer::pem_slice_iter(pem.as_bytes())
                .map(|c| c.unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn vector_settings(extra_roots: Option<&str>) -> PaypalSettings {
    PaypalSettings {
        extra_roots_pem: extra_roots.map(|pem| pem.as_bytes().to_vec()),
        ..PaypalSettings::new(WEBHOOK_ID)
    }
}

/// A verifier whose cache already holds the vector's chain for its URL, as if it had been
/// fetched: the whole public path runs without the network (the chain is still checked).
fn verifier_holding_the_vector_chain(extra_roots: Option<&str>) -> PaypalVerifier {
    let verifier = PaypalVerifier::new(vector_settings(extra_roots)).unwrap();
    let chain: Chain = chain_of(&[VECTOR_CERT_PEM, DIGICERT_EV_INTERMEDIATE_PEM]).into();
    verifier.cache.store(CERT_URL_VALUE, chain);
    verifier
}

#[test]
fn the_digicert_certificates_are_the_published_ones() {
    for (pem, fingerprint) in [
        (
            DIGICERT_EV_INTERMEDIATE_PEM,
            DIGICERT_EV_INTERMEDIATE_SHA256,
        ),
        (DIGICERT_EV_ROOT_PEM, DIGICERT_EV_ROOT_SHA256),
    ] {
        let der = &chain_of(&[pem])[0];
        assert_eq!(hex::encode(Sha256::digest(der.as_ref())), fingerprint);
    }
}

#[test]
fn the_signed_string_is_the_vectors() {
    assert_eq!(
        signed_string(
            TRANSMISSION_ID_VALUE,
            TRANSMISSION_TIME_VALUE,
            WEBHOOK_ID,
            BODY.as_bytes()
        ),
        SIGNED_STRING
    );
    // The CRC-32 is unsigned: this one is above i32::MAX.
    assert!(crc32fast::hash(BODY.as_bytes()) > i32::MAX as u32);
}

#[test]
fn the_vector_signature_verifies_with_its_certificates_key_dates_aside() {
    use base64::Engine as _;
    let leaf = &chain_of(&[VECTOR_CERT_PEM])[0];
    let signature = base64::engine::general_purpose::STANDARD
        .decode(SIGNATURE_B64)
        .unwrap();
    assert_eq!(
        check_signature(leaf, SIGNED_STRING.as_bytes(), &signature),
        Ok(())
    );
    let tampered = signed_string(
        TRANSMISSION_ID_VALUE,
        TRANSMISSION_TIME_VALUE,
        WEBHOOK_ID,
        BODY.replace("T-Shirt", "X-Shirt").as_bytes(),
    );
    assert_eq!(
        check_signature(leaf, tampered.as_bytes(), &signature),
        Err(SignatureError::NoMatch)
    );
    let other_webhook = signed_string(
        TRANSMISSION_ID_VALUE,
        TRANSMISSION_TIME_VALUE,
        "96605875FF6516634",
        BODY.as_bytes(),
    );
    assert_eq!(
        check_signature(leaf, other_webhook.as_bytes(), &signature),
        Err(SignatureError::NoMatch)
    );
}

#[test]
fn the_vector_passes_the_known_answer_check_and_a_changed_one_does_not() {
    let pem = VECTOR_CERT_PEM.as_bytes();
    assert_eq!(
        check_vector(pem, WEBHOOK_ID, &vector_headers(), BODY.as_bytes()),
        Ok(())
    );
    assert_eq!(
        check_vector(pem, WEBHOOK_ID, &vector_headers(), b"{}"),
        Err(SignatureError::NoMatch)
    );
    assert_eq!(
        check_vector(pem, "96605875FF6516634", &vector_headers(), BODY.as_bytes()),
        Err(SignatureError::NoMatch)
    );
    let later = with_header("PAYPAL-TRANSMISSION-TIME", Some("2017-03-30T20:04:06Z"));
    assert_eq!(
        check_vector(pem, WEBHOOK_ID, &later, BODY.as_bytes()),
        Err(SignatureError::NoMatch)
    );
    // The DigiCert intermediate's key did not sign it either.
    assert_eq!(
        check_vector(
            DIGICERT_EV_INTERMEDIATE_PEM.as_bytes(),
            WEBHOOK_ID,
            &vector_headers(),
            BODY.as_bytes()
        ),
        Err(SignatureError::NoMatch)
    );
}

fn trust(extra_roots: Option<&str>) -> Trust {
    let roots = roots(extra_roots.map(str::as_bytes)).unwrap();
    Trust::new(
        roots.roots,
        names_of(&CertUrlPolicy::new(&["paypal.com".to_owned()]).unwrap()),
    )
}

#[test]
fn the_vector_chain_verifies_inside_its_dates_and_is_refused_after_them() {
    let chain = chain_of(&[VECTOR_CERT_PEM, DIGICERT_EV_INTERMEDIATE_PEM]);
    let trust = trust(Some(DIGICERT_EV_ROOT_PEM));
    assert_eq!(
        trust.check(&chain, certificate::unix_time(vector_now())),
        Ok(())
    );
    // The leaf's last second, then the next day and the contract's today.
    assert_eq!(
        trust.check(&chain, certificate::unix_time(at("2019-04-26T12:00:00Z"))),
        Ok(())
    );
    for later in ["2019-04-27T00:00:00Z", "2026-12-01T00:00:00Z"] {
        let refusal = trust
            .check(&chain, certificate::unix_time(at(later)))
            .unwrap_err();
        assert_eq!(refusal.reason, certificate::EXPIRED, "{later}: {refusal:?}");
    }
    let refusal = trust
        .check(&chain, certificate::unix_time(at("2017-02-17T00:00:00Z")))
        .unwrap_err();
    assert_eq!(refusal.reason, certificate::NOT_YET_VALID);
}

#[test]
fn the_vector_chain_needs_its_root_and_its_intermediate() {
    let now = certificate::unix_time(vector_now());
    // webpki-roots alone: Mozilla no longer lists the DigiCert High Assurance EV root.
    let chain = chain_of(&[VECTOR_CERT_PEM, DIGICERT_EV_INTERMEDIATE_PEM]);
    assert_eq!(
        trust(None).check(&chain, now).unwrap_err().reason,
        certificate::UNTRUSTED
    );
    // The leaf alone cannot reach the root without its issuer...
    let leaf_only = chain_of(&[VECTOR_CERT_PEM]);
    assert_eq!(
        trust(Some(DIGICERT_EV_ROOT_PEM))
            .check(&leaf_only, now)
            .unwrap_err()
            .reason,
        certificate::UNTRUSTED
    );
    // ...unless the issuer itself is configured as trusted (what PayPal's Java SDK ships).
    assert_eq!(
        trust(Some(DIGICERT_EV_INTERMEDIATE_PEM)).check(&leaf_only, now),
        Ok(())
    );
}

#[test]
fn the_vector_leaf_must_name_an_allowed_host() {
    let chain = chain_of(&[VECTOR_CERT_PEM, DIGICERT_EV_INTERMEDIATE_PEM]);
    let mut trust = trust(Some(DIGICERT_EV_ROOT_PEM));
    trust.names = names_of(&CertUrlPolicy::new(&["api.sandbox.paypal.com".to_owned()]).unwrap());
    let refusal = trust
        .check(&chain, certificate::unix_time(vector_now()))
        .unwrap_err();
    assert_eq!(refusal.reason, certificate::NAME_NOT_ALLOWED);
    assert!(
        refusal
            .detail
            .contains("messageverificationcerts.sandbox.paypal.com")
    );
}

#[tokio::test]
async fn the_vector_delivery_verifies_end_to_end_at_its_time() {
    let verifier = verifier_holding_the_vector_chain(Some(DIGICERT_EV_ROOT_PEM));
    let verified = verifier
        .verify(&vector_headers(), BODY.as_bytes(), vector_now())
        .await
        .unwrap();
    assert_eq!(
        verified.timestamp,
        Some(at(TRANSMISSION_TIME_VALUE).timestamp())
    );
    assert_eq!(verified.naming, crate::signature::scheme::Naming::Body);
}

#[tokio::test]
async fn the_vector_delivery_with_a_tampered_body_or_another_webhook_id_fails() {
    let verifier = verifier_holding_the_vector_chain(Some(DIGICERT_EV_ROOT_PEM));
    let tampered = BODY.replace("\"value\":\"100\"", "\"value\":\"900\"");
    assert_eq!(
        verifier
            .verify(&vector_headers(), tampered.as_bytes(), vector_now())
            .await,
        Err(PaypalError::Refused(SignatureError::NoMatch))
    );
    let other = PaypalVerifier::new(PaypalSettings {
        webhook_id: "0000000000000000X".into(),
        ..vector_settings(Some(DIGICERT_EV_ROOT_PEM))
    })
    .unwrap();
    other.cache.store(
        CERT_URL_VALUE,
        chain_of(&[VECTOR_CERT_PEM, DIGICERT_EV_INTERMEDIATE_PEM]).into(),
    );
    assert_eq!(
        other
            .verify(&vector_headers(), BODY.as_bytes(), vector_now())
            .await,
        Err(PaypalError::Refused(SignatureError::NoMatch))
    );
}

#[tokio::test]
async fn a_cached_chain_is_still_checked_against_the_roots() {
    // Same cache content, but the DigiCert root is not configured: never accepted.
    let verifier = verifier_holding_the_vector_chain(None);
    let Err(PaypalError::Refused(SignatureError::CertificateRefused { reason, .. })) = verifier
        .verify(&vector_headers(), BODY.as_bytes(), vector_now())
        .await
    else {
        panic!("an untrusted chain must be refused");
    };
    assert_eq!(reason, certificate::UNTRUSTED);
}

#[tokio::test]
async fn every_header_is_required_and_checked_before_the_network() {
    // The cache is empty and the URL real: a refusal here was decided offline.
    let verifier = PaypalVerifier::new(vector_settings(None)).unwrap();
    let now = vector_now();
    for name in [
        "PAYPAL-TRANSMISSION-ID",
        "PAYPAL-TRANSMISSION-TIME",
        "PAYPAL-TRANSMISSION-SIG",
        "PAYPAL-CERT-URL",
        "PAYPAL-AUTH-ALGO",
    ] {
        assert_eq!(
            verifier
                .verify(&with_header(name, None), BODY.as_bytes(), now)
                .await,
            Err(PaypalError::Refused(SignatureError::MissingHeader(name))),
            "{name}"
        );
    }
    let cases = [
        (
            "PAYPAL-AUTH-ALGO",
            "SHA1withRSA",
            SignatureError::UnsupportedAlgorithm("PAYPAL-AUTH-ALGO"),
        ),
        (
            "PAYPAL-AUTH-ALGO",
            "SHA256withECDSA",
            SignatureError::UnsupportedAlgorithm("PAYPAL-AUTH-ALGO"),
        ),
        (
            "PAYPAL-TRANSMISSION-SIG",
            "not base64!",
            SignatureError::MalformedHeader("PAYPAL-TRANSMISSION-SIG"),
        ),
        (
            "PAYPAL-TRANSMISSION-TIME",
            "yesterday",
            SignatureError::MalformedHeader("PAYPAL-TRANSMISSION-TIME"),
        ),
        (
            "PAYPAL-TRANSMISSION-TIME",
            "1490904245",
            SignatureError::MalformedHeader("PAYPAL-TRANSMISSION-TIME"),
        ),
        (
            "PAYPAL-TRANSMISSION-ID",
            "a|b",
            SignatureError::MalformedHeader("PAYPAL-TRANSMISSION-ID"),
        ),
        (
            "PAYPAL-CERT-URL",
            "http://api.sandbox.paypal.com/v1/notifications/test",
            SignatureError::CertUrlRefused("not https"),
        ),
    ];
    for (name, value, expected) in cases {
        assert_eq!(
            verifier
                .verify(&with_header(name, Some(value)), BODY.as_bytes(), now)
                .await,
            Err(PaypalError::Refused(expected)),
            "{name}: {value}"
        );
    }
    let long_signature = "A".repeat(2000);
    assert_eq!(
        verifier
            .verify(
                &with_header("PAYPAL-TRANSMISSION-SIG", Some(&long_signature)),
                BODY.as_bytes(),
                now
            )
            .await,
        Err(PaypalError::Refused(SignatureError::MalformedHeader(
            "PAYPAL-TRANSMISSION-SIG"
        )))
    );
    // The algorithm's case is not significant (Java's names are not).
    let verifier = verifier_holding_the_vector_chain(Some(DIGICERT_EV_ROOT_PEM));
    assert!(
        verifier
            .verify(
                &with_header("PAYPAL-AUTH-ALGO", Some("sha256withrsa")),
                BODY.as_bytes(),
                now
            )
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn the_transmission_time_may_be_as_old_as_the_retry_window_but_not_older() {
    let verifier = verifier_holding_the_vector_chain(Some(DIGICERT_EV_ROOT_PEM));
    let sent = at(TRANSMISSION_TIME_VALUE);
    let headers = vector_headers();
    let verify = |now: DateTime<Utc>| verifier.verify(&headers, BODY.as_bytes(), now);
    // PayPal retries for three days: the last retry may carry the first attempt's time.
    assert!(verify(sent + TimeDelta::hours(72)).await.is_ok());
    assert_eq!(
        verify(sent + TimeDelta::hours(72) + TimeDelta::seconds(1)).await,
        Err(PaypalError::Refused(SignatureError::OutsideTolerance {
            skew_secs: -(72 * 3600 + 1)
        }))
    );
    // Ahead of our clock by the tolerance at most.
    assert!(verify(sent - TimeDelta::seconds(300)).await.is_ok());
    assert_eq!(
        verify(sent - TimeDelta::seconds(301)).await,
        Err(PaypalError::Refused(SignatureError::OutsideTolerance {
            skew_secs: 301
        }))
    );
}

#[test]
fn the_verify_future_is_send() {
    fn send<T: Send>(_: &T) {}
    let verifier = PaypalVerifier::new(vector_settings(None)).unwrap();
    let headers = vector_headers();
    let future = verifier.verify(&headers, BODY.as_bytes(), vector_now());
    send(&future);
}

#[test]
fn settings_that_cannot_work_are_refused_naming_the_key() {
    let field_of = |settings: PaypalSettings| settings.validate().unwrap_err().field;
    for webhook_id in ["", "a|b", "has space", &"x".repeat(129)] {
        assert_eq!(
            field_of(PaypalSettings::new(webhook_id)),
            "webhook_id",
            "{webhook_id:?}"
        );
    }
    assert_eq!(
        field_of(PaypalSettings {
            cert_url_hosts: vec![],
            ..PaypalSettings::new(WEBHOOK_ID)
        }),
        "cert_url_hosts"
    );
    assert_eq!(
        field_of(PaypalSettings {
            cert_url_hosts: vec!["com".into()],
            ..PaypalSettings::new(WEBHOOK_ID)
        }),
        "cert_url_hosts"
    );
    for pem in [
        "",
        "not pem at all",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ] {
        assert_eq!(
            field_of(PaypalSettings {
                extra_roots_pem: Some(pem.as_bytes().to_vec()),
                ..PaypalSettings::new(WEBHOOK_ID)
            }),
            "ca_file",
            "{pem:?}"
        );
    }
    assert_eq!(
        vector_settings(Some(DIGICERT_EV_ROOT_PEM)).validate(),
        Ok(())
    );
    assert!(PaypalVerifier::new(PaypalSettings::new("")).is_err());
}

#[test]
fn the_default_allows_paypal_hosts_only() {
    let settings = PaypalSettings::new(WEBHOOK_ID);
    assert_eq!(settings.cert_url_hosts, vec!["paypal.com".to_owned()]);
}
