//! The daemon's journal: one JSON file in its state directory holding every
//! command it has accepted and not yet had acknowledged — when it was
//! accepted, the process running it, and its result once there is one.
//!
//! Every change rewrites the file whole: a temporary file is written and
//! fsynced, renamed over the journal, and the directory is fsynced, so a
//! crash leaves either the old journal or the new one, never half of one.
//! The file is small (the commands in flight, results bounded), so a
//! rewrite costs a few milliseconds.
//!
//! The order of writes is what makes a command run at most once: a claimed
//! command is journaled before its process starts, its pid right after,
//! its result before it is sent. After a restart, an entry with a result is
//! resent; one whose process is still alive is watched until it ends; any
//! other is reported `unknown` — it may have run, so it is never run again.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use holdfast_wire::domain::{ClaimedCommand, CommandResult, DaemonCommandState, ReportedCommand};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

const FILE_NAME: &str = "journal.json";
const TEMP_NAME: &str = "journal.json.tmp";
const FORMAT_VERSION: u32 = 1;

/// One accepted command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub command: ClaimedCommand,
    /// Set once its process started.
    pub process: Option<Process>,
    /// Set once it ended; cleared (with the entry) when the server acknowledges it.
    pub result: Option<CommandResult>,
}

/// The process running a command (its own process group: pgid = pid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// The process the daemon started (bwrap, or `sh` without a sandbox);
    /// its process group is the command's.
    pub pid: u32,
    /// The host pid of the sandbox's first process (its PID namespace's
    /// init): killing it ends every process of the command, those that
    /// left the process group included. `None` without a sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_pid: Option<u32>,
    /// The kernel's start time of the process (clock ticks since boot, from
    /// /proc), so a reused pid is not mistaken for it.
    pub start_ticks: Option<u64>,
    pub started_at: DateTime<Utc>,
}

impl Entry {
    /// The entry as a heartbeat reports it.
    pub fn report(&self) -> ReportedCommand {
        let state = match (&self.result, &self.process) {
            (Some(_), _) => DaemonCommandState::Finished,
            (None, Some(_)) => DaemonCommandState::Running,
            (None, None) => DaemonCommandState::Accepted,
        };
        ReportedCommand {
            id: self.command.id,
            state,
            pid: match state {
                DaemonCommandState::Running => self.process.map(|p| p.pid),
                _ => None,
            },
        }
    }
}

#[derive(Serialize, Deserialize)]
struct JournalFile {
    version: u32,
    commands: BTreeMap<Uuid, Entry>,
}

/// The journal, loaded; every change is saved before the call returns.
pub struct Journal {
    dir: PathBuf,
    commands: BTreeMap<Uuid, Entry>,
}

impl Journal {
    /// Open (creating the directory) and load the journal of `dir`. The
    /// directory is made 0700 and the journal is written 0600: it holds
    /// the commands and their output, for this user alone.
    pub fn open(dir: &Path) -> io::Result<Journal> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        let commands = match fs::read(dir.join(FILE_NAME)) {
            Ok(bytes) => {
                let file: JournalFile = serde_json::from_slice(&bytes).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: {e}", dir.join(FILE_NAME).display()),
                    )
                })?;
                if file.version != FORMAT_VERSION {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("journal format {} is not {FORMAT_VERSION}", file.version),
                    ));
                }
                file.commands
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Journal {
            dir: dir.to_path_buf(),
            commands,
        })
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.commands.values()
    }

    pub fn get(&self, id: Uuid) -> Option<&Entry> {
        self.commands.get(&id)
    }

    /// What a heartbeat reports: every entry.
    pub fn report(&self) -> Vec<ReportedCommand> {
        self.commands.values().map(Entry::report).collect()
    }

    /// Entries with a result the server has not acknowledged yet.
    pub fn unsent_results(&self) -> Vec<(Uuid, CommandResult)> {
        self.commands
            .values()
            .filter_map(|e| e.result.clone().map(|r| (e.command.id, r)))
            .collect()
    }

    /// Journal commands a claim returned, before any of them starts.
    pub fn record_accepted(&mut self, commands: &[ClaimedCommand]) -> io::Result<()> {
        for command in commands {
            self.commands.entry(command.id).or_insert_with(|| Entry {
                command: command.clone(),
                process: None,
                result: None,
            });
        }
        self.save()
    }

    pub fn record_started(&mut self, id: Uuid, process: Process) -> io::Result<()> {
        if let Some(entry) = self.commands.get_mut(&id) {
            entry.process = Some(process);
        }
        self.save()
    }

    pub fn record_result(&mut self, id: Uuid, result: CommandResult) -> io::Result<()> {
        if let Some(entry) = self.commands.get_mut(&id) {
            entry.result = Some(result);
        }
        self.save()
    }

    /// Drop an entry the server has acknowledged.
    pub fn forget(&mut self, id: Uuid) -> io::Result<()> {
        if self.commands.remove(&id).is_some() {
            self.save()?;
        }
        Ok(())
    }

    fn save(&self) -> io::Result<()> {
        let bytes = serde_json::to_vec(&JournalFile {
            version: FORMAT_VERSION,
            commands: self.commands.clone(),
        })
        .map_err(io::Error::other)?;
        let temp = self.dir.join(TEMP_NAME);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, self.dir.join(FILE_NAME))?;
        // The rename is durable once the directory is.
        File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_wire::domain::CommandResultState;

    fn command() -> ClaimedCommand {
        ClaimedCommand {
            id: Uuid::new_v4(),
            tool_call_id: Uuid::new_v4(),
            agent_id: Uuid::new_v4(),
            command: "echo hi".into(),
            timeout_secs: 60,
            accepted_at: Utc::now(),
            traceparent: None,
            tracestate: None,
            workspace: Default::default(),
        }
    }

    fn temp_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("holdfast-journal-{}", Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn every_change_survives_a_reopen_and_reports_its_stage() {
        let dir = temp_dir();
        let (a, b) = (command(), command());
        let mut journal = Journal::open(&dir).unwrap();
        journal.record_accepted(&[a.clone(), b.clone()]).unwrap();
        let process = Process {
            pid: 42,
            sandbox_pid: Some(43),
            start_ticks: Some(7),
            started_at: Utc::now(),
        };
        journal.record_started(a.id, process).unwrap();
        let result = CommandResult {
            state: CommandResultState::Finished,
            exit_code: Some(0),
            stdout: "hi\n".into(),
            ..CommandResult::unknown()
        };
        journal.record_result(b.id, result.clone()).unwrap();

        let reopened = Journal::open(&dir).unwrap();
        let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700, "the state directory is its owner's");
        assert_eq!(
            mode(&dir.join(FILE_NAME)),
            0o600,
            "the journal is its owner's"
        );
        assert_eq!(reopened.get(a.id).unwrap().process, Some(process));
        assert_eq!(reopened.unsent_results(), vec![(b.id, result)]);
        let mut report = reopened.report();
        report.sort_by_key(|r| r.id != a.id);
        assert_eq!(report[0].state, DaemonCommandState::Running);
        assert_eq!(report[0].pid, Some(42));
        assert_eq!(report[1].state, DaemonCommandState::Finished);

        let mut journal = reopened;
        journal.forget(b.id).unwrap();
        assert!(Journal::open(&dir).unwrap().get(b.id).is_none());
        assert!(!dir.join(TEMP_NAME).exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_journal_is_an_error_not_an_empty_one() {
        let dir = temp_dir();
        fs::write(dir.join(FILE_NAME), b"{not json").unwrap();
        assert!(Journal::open(&dir).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// A damaged journal file (any bytes, or a valid one cut short)
            /// is an error or a journal, never a panic.
            #[test]
            fn any_file_content_opens_or_errs(
                bytes in proptest::collection::vec(any::<u8>(), 0..256),
                cut in any::<usize>(),
            ) {
                let dir = temp_dir();
                let mut journal = Journal::open(&dir).unwrap();
                journal.record_accepted(&[command()]).unwrap();
                let saved = fs::read(dir.join(FILE_NAME)).unwrap();
                let cut_short = &saved[..cut % (saved.len() + 1)];
                for content in [&bytes[..], cut_short] {
                    fs::write(dir.join(FILE_NAME), content).unwrap();
                    let _ = Journal::open(&dir);
                }
                fs::remove_dir_all(&dir).unwrap();
            }

            /// Output of any text survives a reopen unchanged.
            #[test]
            fn any_output_survives_a_reopen(stdout in any::<String>(), stderr in any::<String>()) {
                let dir = temp_dir();
                let command = command();
                let mut journal = Journal::open(&dir).unwrap();
                journal.record_accepted(std::slice::from_ref(&command)).unwrap();
                let result = CommandResult {
                    state: CommandResultState::Finished,
                    exit_code: Some(0),
                    stdout,
                    stderr,
                    ..CommandResult::unknown()
                };
                journal.record_result(command.id, result.clone()).unwrap();
                prop_assert_eq!(Journal::open(&dir).unwrap().unsent_results(), vec![(command.id, result)]);
                fs::remove_dir_all(&dir).unwrap();
            }
        }
    }
}
