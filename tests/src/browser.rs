//! A real headless Chromium for the console's tests, driven over WebDriver:
//! Debian's `chromium` and `chromedriver`, one chromedriver per [`Browser`]
//! on a free loopback port, talked to by `fantoccini`.
//!
//! Chromium runs with a fresh profile and its background services off: this
//! machine's network is closed, and the browser must not reach anywhere but
//! the console under test. Every process it starts works in the browser's
//! scratch directory, which is how [`Browser`]'s drop finds and kills them
//! all even when a test panics before closing the session.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::actions::{
    InputSource, KeyAction, KeyActions, MouseActions, PointerAction, MOUSE_BUTTON_LEFT,
};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::process::processes_working_in;
use crate::wait_until;

/// `program`'s path on `PATH` (as `.ci/run` looks for it), if any.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

/// How long any one page condition may take to come true.
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Browser {
    pub client: Client,
    scratch: PathBuf,
    _driver: Child,
}

impl Browser {
    /// A browser. Without Chromium or chromedriver on PATH the test fails,
    /// naming what to install: `.ci/run` installs both.
    pub async fn start() -> Browser {
        let (Some(chromium), Some(chromedriver)) = (on_path("chromium"), on_path("chromedriver"))
        else {
            panic!(
                "chromium and chromedriver must be on PATH for the browser tests \
                 (apt-get install chromium chromium-driver)"
            );
        };
        let scratch = std::env::temp_dir().join(format!(
            "holdfast-browser-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let profile = scratch.join("profile");
        std::fs::create_dir_all(&profile).expect("create the browser's scratch directory");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("find a free port")
            .port();
        let log = std::fs::File::create(scratch.join("chromedriver.log")).expect("driver log");
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .current_dir(&scratch)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let driver_url = format!("http://127.0.0.1:{port}");
        let http = holdfast_outbound::client_builder().build().unwrap();
        let status = format!("{driver_url}/status");
        wait_until(PAGE_TIMEOUT, "chromedriver answers /status", || async {
            http.get(&status)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object literal")
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&driver_url)
            .await
            .expect("open a Chromium session");
        Browser {
            client,
            scratch,
            _driver: driver,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// Run `script` (a function body; `arguments` are `args`) in the page.
    pub async fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The text of the first element matching `css` ("" when there is none).
    pub async fn text(&self, css: &str) -> String {
        self.eval(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';",
            vec![json!(css)],
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// Wait until the page script `condition` (a function body) returns a
    /// truthy value; `what` names it in the panic.
    /// On a timeout the panic shows the page's address and text.
    pub async fn wait_for(&self, what: &str, condition: &str, args: Vec<Value>) {
        let deadline = tokio::time::Instant::now() + PAGE_TIMEOUT;
        loop {
            let met = self
                .client
                .execute(condition, args.clone())
                .await
                .is_ok_and(|v| !matches!(v, Value::Null | Value::Bool(false)));
            if met {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let text = self.text("body").await;
                panic!("timed out after {PAGE_TIMEOUT:?} waiting for {what}; page {url:?} shows:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Wait until an element matches `css`, and return it.
    async fn element(&self, css: &str) -> fantoccini::elements::Element {
        self.wait_for(
            &format!("an element {css}"),
            "return !!document.querySelector(arguments[0]);",
            vec![json!(css)],
        )
        .await;
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
    }

    /// Wait until the element matching `css` has text containing `needle`.
    pub async fn wait_for_text(&self, css: &str, needle: &str) {
        self.wait_for(
            &format!("{css} to show {needle:?}"),
            "const e = document.querySelector(arguments[0]); \
             return !!e && e.textContent.includes(arguments[1]);",
            vec![json!(css), json!(needle)],
        )
        .await;
    }

    /// Click the element matching `css`. A page that re-renders between the
    /// find and the click replaces the element; the click then goes to the
    /// replacement, as a person's would.
    pub async fn click(&self, css: &str) {
        let mut attempts = 0;
        loop {
            match self.element(css).await.click().await {
                Ok(_) => return,
                Err(e) if e.is_stale_element_reference() && attempts < 10 => attempts += 1,
                Err(e) => panic!("click {css}: {e}"),
            }
        }
    }

    /// Double-click the element matching `css`: one WebDriver action of two
    /// clicks, as fast as a person's (the page's handlers see both).
    pub async fn double_click(&self, css: &str) {
        let element = self.element(css).await;
        self.eval(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
            vec![json!(css)],
        )
        .await;
        let left = MOUSE_BUTTON_LEFT;
        let mouse = MouseActions::new("mouse".into())
            .then(PointerAction::MoveToElement {
                element,
                duration: None,
                x: 0.0,
                y: 0.0,
            })
            .then(PointerAction::Down { button: left })
            .then(PointerAction::Up { button: left })
            .then(PointerAction::Down { button: left })
            .then(PointerAction::Up { button: left });
        self.client
            .perform_actions(mouse)
            .await
            .unwrap_or_else(|e| panic!("double-click {css}: {e}"));
    }

    /// Press `key` on the keyboard: whatever has the focus receives it.
    pub async fn press(&self, key: Key) {
        let keys = KeyActions::new("keyboard".into())
            .then(KeyAction::Down { value: key.into() })
            .then(KeyAction::Up { value: key.into() });
        self.client
            .perform_actions(keys)
            .await
            .unwrap_or_else(|e| panic!("press {key:?}: {e}"));
    }

    /// Resize the window (the page's viewport in headless Chromium).
    pub async fn resize(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .expect("resize the window");
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let field = self.element(css).await;
        field.clear().await.expect("clear the field");
        field.send_keys(text).await.expect("type");
    }

    /// Open the console at `base_url` and sign in with `key`; returns once
    /// the page names the project.
    pub async fn sign_in(&self, base_url: &str, key: &str, project_name: &str) {
        self.goto(&format!("{base_url}/")).await;
        self.type_into("#api-key", key).await;
        self.click("#sign-in").await;
        self.wait_for_text("#project-name", project_name).await;
    }

    /// Emulate the system's colour scheme (`prefers-color-scheme`:
    /// `"dark"` or `"light"`) through Chrome's DevTools protocol, as the
    /// operating system's setting would set it.
    pub async fn emulate_color_scheme(&self, scheme: &str) {
        self.client
            .issue_cmd(DevTools {
                cmd: "Emulation.setEmulatedMedia",
                params: json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
            })
            .await
            .unwrap_or_else(|e| panic!("emulate prefers-color-scheme: {scheme}: {e}"));
    }

    /// Save a PNG of the page as docs/images/console-`name`.png, the
    /// screenshots docs/guides/console-pages.md shows (kept current by the tests).
    pub async fn screenshot_for_docs(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("take a screenshot");
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .join("docs/images")
            .join(format!("console-{name}.png"));
        std::fs::write(&path, png).expect("save the screenshot");
        path
    }

    /// Save a PNG of the page as target/console-screenshots/`name`.png.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("take a screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("create the screenshot directory");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("save the screenshot");
        path
    }

    /// End the session (Chromium exits) and stop chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver dies with its handle (kill_on_drop); Chromium and its
        // helpers would outlive it, so kill whatever works in our directory.
        for process in processes_working_in(&self.scratch) {
            if let Some(pid) = process.split(' ').next() {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", pid])
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A Chrome DevTools Protocol command, sent through chromedriver's
/// `goog/cdp/execute` endpoint of the session.
#[derive(Debug)]
struct DevTools {
    cmd: &'static str,
    params: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for DevTools {
    fn endpoint(
        &self,
        base_url: &reqwest::Url,
        session_id: Option<&str>,
    ) -> Result<reqwest::Url, <reqwest::Url as std::str::FromStr>::Err> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &reqwest::Url) -> (axum::http::Method, Option<String>) {
        let body = json!({"cmd": self.cmd, "params": self.params});
        (axum::http::Method::POST, Some(body.to_string()))
    }
}

/// target/console-screenshots (under `CARGO_TARGET_DIR` when set).
fn screenshot_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("workspace root")
                .join("target")
        })
        .join("console-screenshots")
}
