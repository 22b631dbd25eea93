//! Secrets sealed at rest: webhook signing secrets are stored encrypted with a key that
//! lives in a file beside the certificates (`DATA_DIR/pki/secrets.key`, 32 random bytes,
//! 0600, made by `init`), never in the database, so a copy of the database alone gives no
//! secret. In `pki/` because that is what replicas and standbys of one PostgreSQL store
//! share already. ChaCha20-Poly1305 by ring (the AEAD rustls already uses here), a random
//! 96-bit nonce per secret, and the row's id as associated data, so a sealed value moved
//! to another row does not open.
//!
//! Stored form: `sealed:v1:` and the base64 of nonce || ciphertext || tag. A row written
//! before sealing holds its secret in clear: it is still read, and `serve` seals such
//! rows when it starts ([`super::Store::seal_plain_secrets`]).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

const PREFIX: &str = "sealed:v1:";
const KEY_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("the secrets key {path}: {source}")]
    KeyFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the secrets key {0} is not {KEY_LEN} bytes")]
    KeyLength(PathBuf),
    #[error("a sealed secret does not open with this key (another data dir's key?)")]
    Open,
    #[error("no random bytes from the system")]
    Random,
    #[error(
        "no secrets key: run `iohr-controller init` (it makes one) and give every replica the same pki/"
    )]
    NoKey,
}

/// The key of sealed secrets.
#[derive(Clone)]
pub struct SecretKey(std::sync::Arc<LessSafeKey>);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// Where a data dir's key is.
pub fn key_path(data_dir: &Path) -> PathBuf {
    data_dir.join("pki").join("secrets.key")
}

impl SecretKey {
    fn from_bytes(bytes: &[u8]) -> Option<SecretKey> {
        let key = UnboundKey::new(&CHACHA20_POLY1305, bytes).ok()?;
        Some(SecretKey(std::sync::Arc::new(LessSafeKey::new(key))))
    }

    /// The data dir's key, `None` when it has none.
    pub fn load(data_dir: &Path) -> Result<Option<SecretKey>, SealError> {
        if !key_path(data_dir).exists() {
            return Ok(None);
        }
        SecretKey::load_or_create(data_dir).map(|(key, _)| Some(key))
    }

    /// The data dir's key, made (0600, whatever the umask) when there is none yet.
    /// `Ok((key, true))` when it was just made.
    pub fn load_or_create(data_dir: &Path) -> Result<(SecretKey, bool), SealError> {
        let path = key_path(data_dir);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| SealError::KeyFile {
                path: path.clone(),
                source,
            })?;
        }
        let failed = |source| SealError::KeyFile {
            path: path.clone(),
            source,
        };
        match std::fs::read(&path) {
            Ok(bytes) => {
                super::files::tighten(&path, 0o600);
                let key = SecretKey::from_bytes(&bytes)
                    .filter(|_| bytes.len() == KEY_LEN)
                    .ok_or_else(|| SealError::KeyLength(path.clone()))?;
                Ok((key, false))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; KEY_LEN];
                SystemRandom::new()
                    .fill(&mut bytes)
                    .map_err(|_| SealError::Random)?;
                // create_new: two processes making it at once cannot both write one.
                let mut file = match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        return SecretKey::load_or_create(data_dir);
                    }
                    Err(e) => return Err(failed(e)),
                };
                file.write_all(&bytes)
                    .and_then(|()| file.sync_all())
                    .map_err(failed)?;
                let key = SecretKey::from_bytes(&bytes).ok_or(SealError::Random)?;
                Ok((key, true))
            }
            Err(error) => Err(failed(error)),
        }
    }

    /// `secret` sealed for the row `id`.
    pub fn seal(&self, id: &str, secret: &str) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut data = secret.as_bytes().to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(id.as_bytes()),
                &mut data,
            )
            .map_err(|_| SealError::Open)?;
        let mut stored = nonce.to_vec();
        stored.extend_from_slice(&data);
        Ok(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(stored)
        ))
    }

    /// The secret of row `id` as stored: opened when sealed, as it is when in clear.
    pub fn open(&self, id: &str, stored: &str) -> Result<String, SealError> {
        let Some(sealed) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_string());
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .map_err(|_| SealError::Open)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Open);
        }
        let (nonce, data) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Open)?;
        let mut data = data.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(id.as_bytes()), &mut data)
            .map_err(|_| SealError::Open)?;
        String::from_utf8(plain.to_vec()).map_err(|_| SealError::Open)
    }
}

/// Whether a stored value is sealed (rows written before sealing are not).
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("iohr-sealed-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_sealed_secret_opens_with_its_key_and_row_only() {
        let dir = temp_dir();
        assert!(SecretKey::load(&dir).unwrap().is_none(), "load makes none");
        let (key, made) = SecretKey::load_or_create(&dir).unwrap();
        assert!(made);
        let mode = std::fs::metadata(key_path(&dir))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let sealed = key.seal("wh_1", "whsec_abc").unwrap();
        assert!(is_sealed(&sealed) && !sealed.contains("whsec_abc"));
        assert_ne!(
            sealed,
            key.seal("wh_1", "whsec_abc").unwrap(),
            "a fresh nonce"
        );
        assert_eq!(key.open("wh_1", &sealed).unwrap(), "whsec_abc");
        assert!(key.open("wh_2", &sealed).is_err(), "moved to another row");
        // The same file again gives the same key; another data dir's does not open it.
        let (again, made) = SecretKey::load_or_create(&dir).unwrap();
        assert!(!made);
        assert_eq!(again.open("wh_1", &sealed).unwrap(), "whsec_abc");
        let (other, _) = SecretKey::load_or_create(&temp_dir()).unwrap();
        assert!(other.open("wh_1", &sealed).is_err());
        // A row in clear reads as it is; a damaged one does not open.
        assert_eq!(key.open("wh_1", "whsec_plain").unwrap(), "whsec_plain");
        for bad in ["sealed:v1:", "sealed:v1:!!", "sealed:v1:AAAA"] {
            assert!(key.open("wh_1", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_key_file_of_the_wrong_length_is_refused() {
        let dir = temp_dir();
        std::fs::create_dir_all(dir.join("pki")).unwrap();
        std::fs::write(key_path(&dir), b"short").unwrap();
        assert!(matches!(
            SecretKey::load(&dir),
            Err(SealError::KeyLength(_))
        ));
        assert!(matches!(
            SecretKey::load_or_create(&dir),
            Err(SealError::KeyLength(_))
        ));
    }
}
