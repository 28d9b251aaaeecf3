//! The machine `holdfast up --local-machine` runs a daemon for, registered
//! in the database `up` has.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use holdfast_db::store;
use holdfast_db::store::Prepared;
use holdfast_machine::sandbox::SandboxSettings;
use holdfast_machine::Settings;
use holdfast_wire::domain::MachineRegistered;
use serde_json::{json, Value};
use uuid::Uuid;

/// This host's name as a machine name (letters, digits, `.`, `_`, `-`; at
/// most 100; starting with a letter or digit), or `local` when the host
/// name is unknown or has nothing usable.
pub fn host_machine_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(100)
        .collect();
    if name.is_empty() {
        "local".to_owned()
    } else {
        name
    }
}

/// The machine `holdfast up --local-machine` runs a daemon for: registered
/// once, then reused by every later `up` in the same directory. Its token
/// is written nowhere: `up` has the database, so each start gives the
/// machine a new token (rotate_machine_token) and keeps it in memory only.
/// The directory (mode 0700) records which machine it is, in
/// `machine.json` (ids and name, no secret), so `up` never takes over a
/// machine of the same name that it did not register; each machine's
/// journal is a subdirectory named after its id.
pub struct LocalMachine {
    pub id: Uuid,
    pub name: String,
    token: String,
    /// The daemon's journal directory.
    pub state_dir: PathBuf,
}

const RECORD_FILE: &str = "machine.json";
/// Where `up` kept the machine's token before tokens could be rotated; read
/// for the machine's id, then removed.
const LEGACY_CREDENTIAL_FILE: &str = "credential.json";

impl LocalMachine {
    /// The machine of `project` that `dir` records, with a new token, if it
    /// still exists (and its name is `name`, when one is asked for);
    /// otherwise a newly registered one named `name` (default: this host's
    /// name), whose record replaces the old one.
    pub async fn ensure(
        client: &impl Prepared,
        project: Uuid,
        dir: &Path,
        name: Option<&str>,
    ) -> Result<LocalMachine> {
        create_private_dir(dir)?;
        let record = dir.join(RECORD_FILE);
        let legacy = dir.join(LEGACY_CREDENTIAL_FILE);
        let recorded = match read_record(&record)? {
            Some(recorded) => Some(recorded),
            None => read_record(&legacy)?,
        };
        let machine = match recorded {
            Some((id, saved_name)) if name.is_none_or(|name| name == saved_name) => {
                match store::rotate_machine_token(client, project, id).await {
                    Ok(machine) => Some(machine),
                    Err(holdfast_db::Error::NotFound(_)) => None,
                    Err(e) => return Err(e.into()),
                }
            }
            _ => None,
        };
        let machine = match machine {
            Some(machine) => machine,
            None => {
                let name = name.map_or_else(host_machine_name, str::to_owned);
                match store::register_machine(client, project, &name, None).await {
                    Ok(registered) => registered,
                    Err(holdfast_db::Error::Conflict(_)) => bail!(
                        "this project already has a machine named {name:?}, but {} does not \
                         record it; pick another name with --local-machine-name",
                        record.display()
                    ),
                    Err(e) => return Err(e.into()),
                }
            }
        };
        write_record(&record, project, &machine)?;
        match std::fs::remove_file(&legacy) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow!(e).context(format!("removing {}", legacy.display()))),
        }
        Ok(LocalMachine {
            id: machine.machine_id,
            state_dir: dir.join(machine.machine_id.to_string()),
            name: machine.name,
            token: machine.token,
        })
    }

    /// Daemon settings for this machine: the API at `api_url`, commands
    /// run in `work_dir` with the daemon's `pass_env` variables, the rest
    /// as `holdfast machine run`'s defaults.
    pub fn settings(
        &self,
        api_url: &str,
        work_dir: &Path,
        pass_env: Vec<String>,
        sandbox: Option<SandboxSettings>,
        hidden_paths: Vec<PathBuf>,
    ) -> Settings {
        Settings {
            api_url: api_url.to_owned(),
            token: self.token.clone(),
            state_dir: self.state_dir.clone(),
            work_dir: work_dir.to_path_buf(),
            pass_env,
            sandbox,
            hidden_paths,
            ..Settings::default()
        }
    }
}

/// Create `dir` (and its parents) and make it this user's alone (0700).
fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", dir.display()))
}

/// (machine id, name) from a record; `None` when there is none.
fn read_record(path: &Path) -> Result<Option<(Uuid, String)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!(e).context(format!("reading {}", path.display()))),
    };
    let saved: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON; remove it to register anew", path.display()))?;
    let id = saved["machine_id"].as_str().and_then(|id| id.parse().ok());
    match (id, saved["name"].as_str()) {
        (Some(id), Some(name)) => Ok(Some((id, name.to_owned()))),
        _ => bail!(
            "{} lacks a machine_id or a name; remove it to register anew",
            path.display()
        ),
    }
}

/// Record which machine this directory serves (no token), readable by this
/// user only, replacing any previous record whole (a temporary file
/// renamed over it).
fn write_record(path: &Path, project: Uuid, machine: &MachineRegistered) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let document = json!({
        "project_id": project,
        "machine_id": machine.machine_id,
        "name": machine.name,
    });
    let temporary = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("writing {}", temporary.display()))?;
    file.write_all(serde_json::to_string_pretty(&document)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
