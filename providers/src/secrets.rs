//! Secrets at rest: a project's own provider keys, sealed with AES-256-GCM
//! under the operator's `HOLDFAST_SECRET_KEY` (32 random bytes, base64, e.g.
//! `openssl rand -base64 32`).
//!
//! The API seals a key as it arrives and the worker opens it when calling
//! the provider; the database only ever holds the sealed bytes. The project
//! id and provider are the associated data, so a sealed key copied into
//! another project's row does not open. Each sealed key records the
//! fingerprint of the secret key that sealed it: a worker with another
//! secret key says so, instead of reporting a corrupt key.
//!
//! Rotation: one secret key at a time. Keys sealed under an earlier secret
//! key no longer open after it changes; projects then set their keys again
//! (`PUT /v1/provider-keys/{provider}`).

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use holdfast_wire::domain::SealedKey;

/// The environment variable holding the operator's secret key.
pub const SECRET_KEY_ENV: &str = "HOLDFAST_SECRET_KEY";

/// The first byte of every sealed value: the format (nonce, then
/// ciphertext and tag), so that another can follow.
const FORMAT_V1: u8 = 1;
const NONCE_LEN: usize = 12;

/// The operator's secret key, ready to seal and open.
#[derive(Clone)]
pub struct SecretKey {
    cipher: Aes256Gcm,
    fingerprint: String,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// Why a secret could not be set up, sealed or opened. Messages never hold
/// key material.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("{SECRET_KEY_ENV} must be 32 bytes, base64-encoded (e.g. `openssl rand -base64 32`)")]
    InvalidSecretKey,
    #[error(
        "this provider key was sealed under another {SECRET_KEY_ENV} (fingerprint {sealed_with}, \
         this process has {current}); set the project's key again"
    )]
    OtherSecretKey {
        sealed_with: String,
        current: String,
    },
    #[error("the sealed provider key does not open (corrupt, or not this project's)")]
    Unsealable,
}

impl SecretKey {
    /// The key from its base64 text.
    pub fn parse(text: &str) -> Result<SecretKey, SecretError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| SecretError::InvalidSecretKey)?;
        if bytes.len() != 32 {
            return Err(SecretError::InvalidSecretKey);
        }
        let mut hasher = Sha256::new();
        hasher.update(b"holdfast secret key fingerprint\0");
        hasher.update(&bytes);
        let fingerprint = hex::encode(&hasher.finalize()[..8]);
        Ok(SecretKey {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes)),
            fingerprint,
        })
    }

    /// `HOLDFAST_SECRET_KEY` from `lookup` (the environment): `None` when
    /// unset or empty.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<SecretKey>, SecretError> {
        match lookup(SECRET_KEY_ENV).filter(|v| !v.trim().is_empty()) {
            None => Ok(None),
            Some(text) => SecretKey::parse(&text).map(Some),
        }
    }

    /// A short, non-secret name of this key (the start of a SHA-256 of it).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Seal `project`'s key for `provider`.
    pub fn seal_provider_key(&self, project: Uuid, provider: &str, key: &str) -> SealedKey {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let aad = provider_key_aad(project, provider);
        let ciphertext = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: key.as_bytes(),
                    aad: &aad,
                },
            )
            .expect("AES-GCM encrypts any message shorter than 64 GiB");
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + ciphertext.len());
        sealed.push(FORMAT_V1);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        SealedKey {
            sealed,
            key_fingerprint: self.fingerprint.clone(),
        }
    }

    /// Open `project`'s sealed key for `provider`.
    pub fn open_provider_key(
        &self,
        project: Uuid,
        provider: &str,
        key: &SealedKey,
    ) -> Result<String, SecretError> {
        if key.key_fingerprint != self.fingerprint {
            return Err(SecretError::OtherSecretKey {
                sealed_with: key.key_fingerprint.clone(),
                current: self.fingerprint.clone(),
            });
        }
        let (nonce, ciphertext) = match key.sealed.split_first() {
            Some((&FORMAT_V1, rest)) if rest.len() > NONCE_LEN => rest.split_at(NONCE_LEN),
            _ => return Err(SecretError::Unsealable),
        };
        let aad = provider_key_aad(project, provider);
        let clear = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| SecretError::Unsealable)?;
        String::from_utf8(clear).map_err(|_| SecretError::Unsealable)
    }
}

/// What a provider key is bound to: its project and provider.
fn provider_key_aad(project: Uuid, provider: &str) -> Vec<u8> {
    let mut aad = project.as_bytes().to_vec();
    aad.extend_from_slice(provider.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // "0123456789abcdef" twice

    #[test]
    fn a_sealed_key_opens_only_for_its_project_and_provider() {
        let secret = SecretKey::parse(KEY).unwrap();
        let project = Uuid::new_v4();
        let sealed = secret.seal_provider_key(project, "openai", "sk-tenant");
        assert!(!sealed
            .sealed
            .windows(b"sk-tenant".len())
            .any(|w| w == b"sk-tenant"));
        assert_eq!(
            secret.open_provider_key(project, "openai", &sealed),
            Ok("sk-tenant".to_owned())
        );
        assert_eq!(
            secret.open_provider_key(Uuid::new_v4(), "openai", &sealed),
            Err(SecretError::Unsealable)
        );
        assert_eq!(
            secret.open_provider_key(project, "anthropic", &sealed),
            Err(SecretError::Unsealable)
        );
        let again = secret.seal_provider_key(project, "openai", "sk-tenant");
        assert_ne!(again.sealed, sealed.sealed, "a fresh nonce each time");
    }

    #[test]
    fn another_secret_key_is_named_not_reported_as_corruption() {
        let sealed =
            SecretKey::parse(KEY)
                .unwrap()
                .seal_provider_key(Uuid::nil(), "anthropic", "k");
        let other =
            SecretKey::parse(&base64::engine::general_purpose::STANDARD.encode([7u8; 32])).unwrap();
        assert!(matches!(
            other.open_provider_key(Uuid::nil(), "anthropic", &sealed),
            Err(SecretError::OtherSecretKey { .. })
        ));
        assert!(!format!("{other:?}").contains("cipher"));
    }

    #[test]
    fn the_secret_key_must_be_32_bytes_of_base64() {
        assert_eq!(
            SecretKey::parse("c2hvcnQ=").unwrap_err(),
            SecretError::InvalidSecretKey
        );
        assert_eq!(
            SecretKey::parse("not base64!").unwrap_err(),
            SecretError::InvalidSecretKey
        );
        assert!(SecretKey::from_lookup(|_| None).unwrap().is_none());
        assert!(SecretKey::from_lookup(|_| Some(KEY.into()))
            .unwrap()
            .is_some());
    }
}
