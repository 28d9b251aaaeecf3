//! Standard Webhooks signatures (symmetric, `v1`): HMAC-SHA256 over
//! `{webhook-id}.{webhook-timestamp}.{body}`, keyed with the base64-decoded
//! part of the `whsec_` secret, sent base64-encoded as `v1,<signature>`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The secret is not `whsec_` followed by valid base64.
#[derive(Debug, thiserror::Error)]
#[error("webhook secret is not whsec_ followed by base64")]
pub struct InvalidSecret;

/// The `webhook-signature` header value for one attempt.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Result<String, InvalidSecret> {
    let encoded = secret.strip_prefix("whsec_").ok_or(InvalidSecret)?;
    let key = STANDARD.decode(encoded).map_err(|_| InvalidSecret)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|_| InvalidSecret)?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector published with the Standard Webhooks reference libraries
    /// (checked with Python's hmac module while writing this).
    #[test]
    fn matches_the_reference_vector() {
        let signature = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        )
        .unwrap();
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn rejects_secrets_without_prefix_or_base64() {
        assert!(sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "id", 1, b"{}").is_err());
        assert!(sign("whsec_not base64!", "id", 1, b"{}").is_err());
    }
}
