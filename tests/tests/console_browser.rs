//! The web console in a real headless Chromium (WebDriver), against a real
//! API server, a real `holdfast worker` process and the fake model provider
//! speaking the Anthropic wire protocol: sign in, live deltas before the
//! answer is saved, the operations page, approving and answering from the page, a 409 when
//! someone else answered first, model output that holds markup, a
//! megabyte of unclosed markdown marks rendered in linear time, and the
//! agent list over 1,000 agents. One more test shares one browser session,
//! server and worker across scenarios run in turn (each an async fn named
//! after what it asserts): every part of the operations page, a phone-sized
//! viewport, the keyboard alone, a double click on Send, a 422 config patch,
//! questions answered here and elsewhere, cancel and archive, and resuming
//! after the API restarts. Each test saves screenshots to
//! target/console-screenshots/.
//!
//! Without Chromium and chromedriver these tests fail, naming what to
//! install (`.ci/run` installs both).

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};

use fantoccini::key::Key;
use holdfast_db::store;
use holdfast_db::store::NewModelPrice;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{project_key, waiting_tool_call, ApiServer};
use holdfast_tests::browser::Browser;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{
    agent_state, answer_waiting_call, count_events, spawn_worker, wait_for_event, wait_for_events,
};
use holdfast_tests::{default_config, wait_for_lock_wait, TestDb};
use holdfast_wire::domain::{Claim, Heartbeat, ModelStep, ToolKind};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const TURN_TIMEOUT: Duration = Duration::from_secs(30);

/// A browser, a database with one project, and an API server on it.
struct Console {
    browser: Browser,
    db: TestDb,
    client: Client,
    api: ApiServer,
    project: Uuid,
    project_name: String,
    key: String,
}

impl Console {
    async fn start() -> Console {
        let browser = Browser::start().await;
        let db = TestDb::new().await;
        let client = db.connect().await;
        let api = ApiServer::start(&db).await;
        let (project, key) = project_key(&client).await;
        let project_name: String = client
            .query_one(
                "SELECT name FROM holdfast.projects WHERE id = $1",
                &[&project],
            )
            .await
            .unwrap()
            .get(0);
        Console {
            browser,
            db,
            client,
            api,
            project,
            project_name,
            key,
        }
    }

    async fn sign_in(&self) {
        self.browser
            .sign_in(&self.api.url(""), &self.key, &self.project_name)
            .await;
    }

    /// A worker process whose model is `fake`.
    fn worker(&self, name: &str, fake: &FakeProvider) -> HoldfastProcess {
        spawn_worker(name, &self.db.config, fake, &[])
    }

    /// Open the agent's page and wait until its live stream is connected.
    async fn open_agent(&self, agent: Uuid) {
        self.browser
            .goto(&self.api.url(&format!("/#/agents/{agent}")))
            .await;
        self.browser
            .wait_for_text("#stream-status", "stream: live")
            .await;
    }

    async fn new_agent(&self, config: &Value) -> Uuid {
        store::create_agent(&self.client, self.project, config)
            .await
            .unwrap()
    }

    async fn input(&self, agent: Uuid, text: &str) {
        store::create_input(&self.client, agent, &json!(text), None)
            .await
            .unwrap();
    }

    /// Wait until the page's timeline shows an event card of `kind` whose
    /// text contains `needle`.
    async fn wait_for_card(&self, kind: &str, needle: &str) {
        self.browser
            .wait_for(
                &format!("a {kind} card showing {needle:?}"),
                "return [...document.querySelectorAll(`#timeline [data-type='${arguments[0]}']`)] \
                     .some((card) => card.textContent.includes(arguments[1]));",
                vec![json!(kind), json!(needle)],
            )
            .await;
    }
}

/// An agent with a custom `refund` tool that needs approval and a custom
/// `lookup` tool that does not.
fn tools_config() -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [
            {"type": "custom", "name": "refund", "input_schema": {"type": "object"}},
            {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}}
        ],
        "approvals": {"require_for": ["refund"]}
    })
}

/// The id of the agent's only tool call named `name`.
async fn tool_call_id(client: &Client, agent: Uuid, name: &str) -> Uuid {
    client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND name = $2",
            &[&agent, &name],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_shows_the_project_and_deltas_show_before_the_answer_is_saved_and_operations_the_worker(
) {
    let console = Console::start().await;
    let agent = console.new_agent(&default_config()).await;
    console.sign_in().await;
    console.open_agent(agent).await;
    // The key is kept in this tab's sessionStorage only: never in
    // localStorage, a cookie or the URL.
    let kept = console
        .browser
        .eval(
            "return [Object.values(sessionStorage).includes(arguments[0]), localStorage.length, \
                     document.cookie, location.href.includes(arguments[0])];",
            vec![json!(console.key)],
        )
        .await;
    assert_eq!(kept, json!([true, 0, "", false]), "where the key is kept");

    let fake = FakeProvider::start().await;
    let answer = "Streaming words arrive live on the page";
    fake.push(Reply::text(answer).hold_after_deltas(3));
    let _worker = console.worker("console-stream-worker", &fake);
    console.input(agent, "tell me something").await;
    fake.wait_until_held(1).await;

    // Three deltas are on the page while the model is still streaming.
    console
        .browser
        .wait_for_text("#live-text .delta-text", "Streaming words arrive")
        .await;
    assert_eq!(
        count_events(&console.client, agent, "model.response").await,
        0,
        "the deltas must show before the answer is saved"
    );
    let saved_cards = console
        .browser
        .eval(
            "return document.querySelectorAll(\"#timeline [data-type='model.response']\").length;",
            vec![],
        )
        .await;
    assert_eq!(saved_cards, json!(0));
    console.browser.screenshot("live-stream").await;

    // Meanwhile the operations page shows the worker holding the agent.
    console
        .browser
        .goto(&console.api.url("/#/operations"))
        .await;
    console
        .browser
        .wait_for_text("#workers", "console-stream-worker")
        .await;
    console
        .browser
        .wait_for_text("#workers", &agent.to_string())
        .await;
    console.browser.wait_for_text("#counts", "running: 1").await;
    console.browser.screenshot("operations").await;
    console.open_agent(agent).await;

    fake.release();
    wait_for_event(&console.client, agent, "turn.completed", TURN_TIMEOUT).await;
    console.wait_for_card("model.response", answer).await;
    console
        .wait_for_card("turn.completed", "turn.completed")
        .await;
    // The saved answer replaces the streaming text, once.
    let page = console
        .browser
        .eval(
            "return { live: document.getElementById('live-text').hidden, \
                      responses: document.querySelectorAll(\"#timeline [data-type='model.response']\").length };",
            vec![],
        )
        .await;
    assert_eq!(page, json!({"live": true, "responses": 1}));
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_and_answering_a_custom_tool_call_from_the_page_lets_the_agent_go_on() {
    let console = Console::start().await;
    let agent = console.new_agent(&tools_config()).await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![("refund", json!({"amount": 5}))]));
    fake.push(Reply::text("Refund of 5 sent."));
    let _worker = console.worker("console-approval-worker", &fake);
    console.sign_in().await;
    console.open_agent(agent).await;
    console.input(agent, "refund order 7").await;

    console
        .browser
        .wait_for_text("form.approval h3", "Approve refund?")
        .await;
    console.browser.screenshot("approval").await;
    console.browser.click("form.approval button.approve").await;

    // Approved, the custom call waits for its result: answer it.
    console
        .browser
        .wait_for_text("form.tool-call h3", "Result for refund")
        .await;
    console
        .browser
        .type_into("form.tool-call textarea", r#"{"refunded": 5}"#)
        .await;
    console
        .browser
        .click("form.tool-call button[type=submit]")
        .await;

    // The agent goes on: the model's next answer shows on the page.
    console
        .wait_for_card("model.response", "Refund of 5 sent.")
        .await;
    console
        .wait_for_card("turn.completed", "turn.completed")
        .await;
    let call = tool_call_id(&console.client, agent, "refund").await;
    let row = console
        .client
        .query_one(
            "SELECT c.output, a.status, a.decided_by
               FROM holdfast.tool_calls c JOIN holdfast.approvals a ON a.tool_call_id = c.id
              WHERE c.id = $1",
            &[&call],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Value>(0), json!({"refunded": 5}));
    assert_eq!(row.get::<_, String>(1), "approved");
    assert_eq!(row.get::<_, String>(2), "console");
    assert_eq!(fake.request_count(), 2, "the model was called again");
    console.browser.screenshot("answered").await;
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_someone_else_sent_first_shows_as_already_answered_with_theirs() {
    let console = Console::start().await;
    let agent = console.new_agent(&tools_config()).await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": 7}))]));
    fake.push(Reply::text("Found it."));
    let _worker = console.worker("console-conflict-worker", &fake);
    console.sign_in().await;
    console.open_agent(agent).await;
    console.input(agent, "look up order 7").await;
    console
        .browser
        .wait_for_text("form.tool-call h3", "Result for lookup")
        .await;
    let call = tool_call_id(&console.client, agent, "lookup").await;

    // Someone else's result, not yet committed, holds the call's row: the
    // page's result waits on it and then finds the call answered.
    let mut other = console.db.connect().await;
    let theirs = other.transaction().await.unwrap();
    store::submit_tool_result(&theirs, call, &json!({"from": "someone else"}), false)
        .await
        .unwrap();
    console
        .browser
        .type_into("form.tool-call textarea", r#"{"from": "the console"}"#)
        .await;
    console
        .browser
        .click("form.tool-call button[type=submit]")
        .await;
    wait_for_lock_wait(&console.client, &console.db.name).await;
    theirs.commit().await.unwrap();

    console
        .browser
        .wait_for_text(
            "#answer-notice",
            r#"result for lookup: already answered: {"from":"someone else"}"#,
        )
        .await;
    console.wait_for_card("model.response", "Found it.").await;
    // The conflict stays readable after the forms are rebuilt without it.
    console
        .browser
        .wait_for_text("#answer-notice", "already answered")
        .await;
    console.browser.screenshot("already-answered").await;
    let output: Value = console
        .client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(output, json!({"from": "someone else"}));
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_reply_holding_markup_renders_as_text_and_runs_nothing() {
    let console = Console::start().await;
    let agent = console.new_agent(&default_config()).await;
    let reply = "Here: <script>window.__holdfast_script_ran = true</script> and \
                 <img src=x onerror=\"window.__holdfast_onerror_ran = true\"> and \
                 [a link](javascript:window.__holdfast_link_ran=true) **bold**";
    let fake = FakeProvider::start().await;
    fake.push(Reply::text(reply));
    let _worker = console.worker("console-markup-worker", &fake);
    console.sign_in().await;
    console.open_agent(agent).await;
    console.input(agent, "<b>an input with markup</b>").await;

    console
        .wait_for_card("model.response", "<img src=x onerror=")
        .await;
    console
        .wait_for_card("input.received", "<b>an input with markup</b>")
        .await;
    let page = console
        .browser
        .eval(
            "const timeline = document.getElementById('timeline'); \
             const text = timeline.querySelector(\"[data-type='model.response'] .model-text\").textContent; \
             return { \
               script_ran: window.__holdfast_script_ran ?? false, \
               onerror_ran: window.__holdfast_onerror_ran ?? false, \
               elements: timeline.querySelectorAll('script, img, b, iframe').length, \
               links: timeline.querySelectorAll('a').length, \
               bold: [...timeline.querySelectorAll('strong')].map((s) => s.textContent), \
               has_script_text: text.includes('<script>window.__holdfast_script_ran = true</script>'), \
               has_img_text: text.includes('<img src=x onerror=\"window.__holdfast_onerror_ran = true\">') \
             };",
            vec![],
        )
        .await;
    assert_eq!(
        page,
        json!({
            "script_ran": false,
            "onerror_ran": false,
            "elements": 0,
            "links": 0,
            "bold": ["bold"],
            "has_script_text": true,
            "has_img_text": true
        }),
        "markup from the model is text; only the safe markdown subset becomes elements"
    );
    console.browser.screenshot("markup-as-text").await;
    console.browser.close().await;
}

/// The console's markdown renders in linear time: a 1 MB model reply full
/// of `[` and `*` whose marks never close (each a place where a pattern
/// retried at every position rescans the rest of the text) renders in
/// under 100 ms, as text; the markdown subset still becomes its elements.
/// The fastest of five renders is timed: another process on a shared core
/// only adds time, and a quadratic render is seconds in every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_megabyte_reply_full_of_brackets_and_stars_renders_in_under_100_ms() {
    let console = Console::start().await;
    console.browser.goto(&console.api.url("/")).await;
    let rendered = console
        .browser
        .eval(
            "return import('/console/render.js').then(({ markdown }) => { \
             const source = '['.repeat(400000) + '[a]('.repeat(50000) + '*'.repeat(400000); \
             let node; let ms = Infinity; \
             for (let run = 0; run < 5; run++) { \
               const started = performance.now(); \
               node = markdown(source); \
               ms = Math.min(ms, performance.now() - started); \
             } \
             const subset = markdown('[ok](https://example.com/) **b** *e* `c` [no](javascript:x) *open'); \
             return { \
               bytes: source.length, \
               ms, \
               as_text: node.textContent === source && node.querySelectorAll('*').length === 1, \
               subset: [...subset.querySelectorAll('a, strong, em, code')] \
                 .map((e) => e.tagName.toLowerCase() + ':' + e.textContent), \
               subset_text: subset.textContent \
             }; });",
            vec![],
        )
        .await;
    assert_eq!(rendered["bytes"], json!(1_000_000));
    assert_eq!(rendered["as_text"], json!(true), "{rendered}");
    assert_eq!(
        rendered["subset"],
        json!(["a:ok", "strong:b", "em:e", "code:c"]),
        "{rendered}"
    );
    assert_eq!(
        rendered["subset_text"],
        json!("ok b e c [no](javascript:x) *open")
    );
    let ms = rendered["ms"].as_f64().unwrap();
    assert!(ms < 100.0, "1 MB rendered in {ms:.1} ms");
    console.browser.close().await;
}

/// Choose `state` in the agents page's state filter ("" for any).
async fn select(browser: &Browser, state: &str) {
    browser
        .client
        .find(fantoccini::Locator::Css("#state-filter"))
        .await
        .expect("the state filter")
        .select_by_value(state)
        .await
        .expect("choose a state");
}

/// The agent ids in the page's agent table, in order.
async fn listed_ids(browser: &Browser) -> Vec<String> {
    let ids = browser
        .eval(
            "return [...document.querySelectorAll('#agents tbody tr td:first-child')].map((td) => td.textContent);",
            vec![],
        )
        .await;
    serde_json::from_value(ids).unwrap()
}

/// Wait until the table lists `n` rows and none of `previous`' first row
/// (a new page has rendered); returns the rows.
async fn wait_for_page(browser: &Browser, n: usize, previous: Option<&str>) -> Vec<String> {
    browser
        .wait_for(
            &format!("a page of {n} agents"),
            "const rows = [...document.querySelectorAll('#agents tbody tr td:first-child')]; \
             return rows.length === arguments[0] && rows[0].textContent !== arguments[1];",
            vec![json!(n), json!(previous)],
        )
        .await;
    listed_ids(browser).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_list_over_1000_agents_pages_through_all_and_filters() {
    let console = Console::start().await;
    // 1,000 agents, activity one second apart (agent 1 the newest); every
    // tenth is archived; metadata names each and a team.
    console
        .client
        .execute(
            "INSERT INTO holdfast.agents (project_id, config, created_at, state)
             SELECT $1,
                    jsonb_build_object(
                        'model', jsonb_build_object('provider', 'anthropic', 'name', 'claude-test'),
                        'metadata', jsonb_build_object('n', g, 'team', CASE WHEN g % 2 = 0 THEN 'red' ELSE 'blue' END)),
                    now() - g * interval '1 second',
                    CASE WHEN g % 10 = 0 THEN 'archived' ELSE 'idle' END
               FROM generate_series(1, 1000) g",
            &[&console.project],
        )
        .await
        .unwrap();
    let newest_first: Vec<String> = console
        .client
        .query(
            "SELECT id::text FROM holdfast.agents WHERE project_id = $1 ORDER BY created_at DESC",
            &[&console.project],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let activity: Vec<DateTime<Utc>> = console
        .client
        .query(
            "SELECT coalesce(last_event_at, created_at) FROM holdfast.agents WHERE project_id = $1 \
              ORDER BY created_at DESC",
            &[&console.project],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    console.sign_in().await;
    console.browser.goto(&console.api.url("/#/agents")).await;
    console.browser.wait_for_text("#counts", "idle: 900").await;
    console
        .browser
        .wait_for_text("#counts", "archived: 100")
        .await;

    // Every agent once, newest activity first, 50 a page.
    let mut seen = Vec::new();
    let mut first_of_page: Option<String> = None;
    for page in 0..20 {
        let rows = wait_for_page(&console.browser, 50, first_of_page.as_deref()).await;
        if page == 0 {
            console.browser.screenshot("agents").await;
            // The time shown is the one the list is ordered by (here each
            // agent's creation: none has events; updated_at is now for all).
            let shown = console
                .browser
                .eval(
                    "return { header: document.querySelector('#agents thead th:last-child').textContent, \
                              times: [...document.querySelectorAll(\"#agents tbody td[data-label='Last activity'] time\")] \
                                       .map((t) => t.getAttribute('datetime')) };",
                    vec![],
                )
                .await;
            assert_eq!(shown["header"], "Last activity");
            let times: Vec<DateTime<Utc>> = serde_json::from_value(shown["times"].clone()).unwrap();
            assert_eq!(times, activity[..50]);
        }
        first_of_page = rows.first().cloned();
        seen.extend(rows);
        let has_next = console
            .browser
            .eval("return !!document.getElementById('next-page');", vec![])
            .await;
        assert_eq!(has_next, json!(page < 19), "next page link on page {page}");
        if page < 19 {
            console.browser.click("#next-page").await;
        }
    }
    assert_eq!(seen, newest_first);
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 1000);

    // Filters: a state, a metadata key=value within it, text.
    console.browser.goto(&console.api.url("/#/agents")).await;
    wait_for_page(&console.browser, 50, first_of_page.as_deref()).await;
    select(&console.browser, "archived").await;
    console.browser.type_into("#search", "team=red").await;
    console.browser.click("#apply-filter").await;
    let archived_red = wait_for_page(&console.browser, 50, Some(&newest_first[0])).await;
    let states = console
        .browser
        .eval(
            "return [...new Set([...document.querySelectorAll(\"#agents tbody td[data-label='State']\")].map((td) => td.textContent))];",
            vec![],
        )
        .await;
    assert_eq!(states, json!(["archived"]));
    // Archived agents are the multiples of ten, all even: all 100 are red.
    let archived: Vec<String> = newest_first.iter().skip(9).step_by(10).cloned().collect();
    assert_eq!(archived_red, archived[..50]);

    select(&console.browser, "").await;
    console.browser.type_into("#search", "n=777").await;
    console.browser.click("#apply-filter").await;
    let one = wait_for_page(&console.browser, 1, Some(&archived[0])).await;
    assert_eq!(one, vec![newest_first[776].clone()]);

    console.browser.type_into("#search", "no such text").await;
    console.browser.click("#apply-filter").await;
    console
        .browser
        .wait_for_text("#no-agents", "No agents match.")
        .await;
    console.browser.screenshot("agents-filtered").await;

    console.browser.close().await;
}

// ---- one browser, one server: operations, a phone, the keyboard, and every
// action on an agent's page ---------------------------------------------------

/// The name of `project`.
async fn project_name(client: &Client, project: Uuid) -> String {
    client
        .query_one(
            "SELECT name FROM holdfast.projects WHERE id = $1",
            &[&project],
        )
        .await
        .unwrap()
        .get(0)
}

/// The cells' text of each row of the page's table `#id`.
async fn table_rows(browser: &Browser, id: &str) -> Vec<Vec<String>> {
    let rows = browser
        .eval(
            "return [...document.querySelectorAll(`#${arguments[0]} tbody tr`)] \
                 .map((tr) => [...tr.cells].map((td) => td.textContent));",
            vec![json!(id)],
        )
        .await;
    serde_json::from_value(rows).unwrap()
}

/// The row of table `#id` whose first cell is `first`.
async fn row_of(browser: &Browser, id: &str, first: &str) -> Vec<String> {
    table_rows(browser, id)
        .await
        .into_iter()
        .find(|row| row[0] == first)
        .unwrap_or_else(|| panic!("no row {first:?} in #{id}"))
}

/// A second project with something in every part of the operations page:
/// a worker holding an agent, an agent whose lease ran out (stuck), a
/// webhook endpoint with a delivery in flight, one to retry after a 500 and
/// one failed, an online machine running a command and one never seen.
struct OpsProject {
    key: String,
    name: String,
    held: Uuid,
    lapsed: Uuid,
    runner: Uuid,
    endpoint: Uuid,
}

async fn ops_project(client: &Client) -> OpsProject {
    let (project, key) = project_key(client).await;
    let endpoint = store::create_webhook_endpoint(
        client,
        project,
        "https://hooks.example.com/holdfast",
        &json!(["input.received"]),
        None,
        false,
    )
    .await
    .unwrap()
    .endpoint
    .id;
    // No other agent is ready (this runs before any worker): each claim
    // takes the agent just given an input.
    let claimed = |worker: &'static str, lease: Duration| async move {
        let agent = store::create_agent(client, project, &default_config())
            .await
            .unwrap();
        store::create_input(client, agent, &json!("work"), None)
            .await
            .unwrap();
        let claims = store::claim_agents(client, worker, 1, lease).await.unwrap();
        assert_eq!(
            claims.iter().map(|c| c.agent_id).collect::<Vec<_>>(),
            vec![agent]
        );
        agent
    };
    let held = claimed("ops-worker", Duration::from_secs(3600)).await;
    let lapsed = claimed("ops-gone-worker", Duration::from_millis(1)).await;

    let machine = store::register_machine(client, project, "build-box", None)
        .await
        .unwrap()
        .machine_id;
    let session = Uuid::new_v4();
    let heartbeat = Heartbeat {
        session,
        started: true,
        commands: vec![],
        sandboxed: Some(true),
        single_session: false,
    };
    store::machine_heartbeat(client, machine, &heartbeat, None)
        .await
        .unwrap();
    store::register_machine(client, project, "never-seen", None)
        .await
        .unwrap();
    let runner = store::create_agent(
        client,
        project,
        &json!({"model": {"provider": "anthropic", "name": "claude-test"},
                "tools": [{"type": "run_command", "machine": machine}]}),
    )
    .await
    .unwrap();
    waiting_tool_call(
        client,
        runner,
        "run_command",
        json!({"command": "make test"}),
        ToolKind::Command,
    )
    .await;
    let accepted = store::claim_commands(client, machine, 10, Some(session))
        .await
        .unwrap();
    assert_eq!(accepted.len(), 1);

    // The three inputs queued three deliveries: one stays in flight, one is
    // retried in an hour after a 500, one failed for good.
    let deliveries = store::claim_webhook_deliveries(client, 10, Duration::from_secs(3600), 10)
        .await
        .unwrap();
    assert_eq!(deliveries.len(), 3);
    let hour = Duration::from_secs(3600);
    store::record_webhook_attempt(client, &deliveries[0], Some(500), None, hour, 24 * hour)
        .await
        .unwrap();
    store::record_webhook_attempt(
        client,
        &deliveries[1],
        None,
        Some("connection refused"),
        hour,
        Duration::ZERO,
    )
    .await
    .unwrap();
    OpsProject {
        name: project_name(client, project).await,
        key,
        held,
        lapsed,
        runner,
        endpoint,
    }
}

impl Console {
    /// Sign out and sign in again with `key` (of the project `name`).
    async fn sign_in_as(&self, key: &str, name: &str) {
        self.browser.click("#sign-out").await;
        self.browser.sign_in(&self.api.url(""), key, name).await;
    }
}

/// Every part of the operations page, against what the database says.
async fn operations_shows_queue_workers_stuck_agents_webhooks_and_machines(
    console: &Console,
    ops: &OpsProject,
) {
    let browser = &console.browser;
    browser.goto(&console.api.url("/#/operations")).await;
    browser.wait_for_text("#machines", "make test").await;
    // Queue depth by state.
    for count in ["running: 2", "waiting: 1", "ready: 0", "idle: 0"] {
        browser.wait_for_text("#counts", count).await;
    }
    // Workers and the leases they hold.
    let worker = row_of(browser, "workers", "ops-worker").await;
    assert_eq!(worker[1], "1", "{worker:?}");
    assert_eq!(worker[3], ops.held.to_string(), "{worker:?}");
    let gone = row_of(browser, "workers", "ops-gone-worker").await;
    assert_eq!(gone[3], ops.lapsed.to_string(), "{gone:?}");
    // Stuck agents with the reason: the one whose lease ran out, only.
    let stuck = table_rows(browser, "stuck").await;
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert_eq!(stuck[0][0], ops.lapsed.to_string());
    assert_eq!(stuck[0][1], "running");
    assert!(stuck[0][2].starts_with("lease expired at "), "{stuck:?}");
    // The webhook endpoint: its backlog as the DBA view counts it, and both
    // failures with what went wrong.
    let queue = console
        .client
        .query_one(
            "SELECT pending, due, in_flight, failed FROM holdfast.webhook_queue WHERE endpoint_id = $1",
            &[&ops.endpoint],
        )
        .await
        .unwrap();
    let counted: Vec<String> = (0..4).map(|i| queue.get::<_, i64>(i).to_string()).collect();
    assert_eq!(counted[2..], ["1", "1"], "one in flight, one failed");
    let hook = row_of(browser, "webhooks", "https://hooks.example.com/holdfast").await;
    assert_eq!(
        [&hook[1], &hook[2], &hook[4], &hook[5]],
        [&counted[0], &counted[1], &counted[2], &counted[3]],
        "{hook:?}"
    );
    assert!(
        hook[6].contains("input.received (pending, 1 attempt): HTTP 500"),
        "{hook:?}"
    );
    assert!(
        hook[6].contains("input.received (failed, 1 attempt): connection refused"),
        "{hook:?}"
    );
    // Machines online and offline, with the command running.
    let machine = row_of(browser, "machines", "build-box").await;
    assert_eq!(machine[1], "online");
    assert!(
        machine[4].starts_with(&format!("make test · {}", ops.runner)),
        "{machine:?}"
    );
    let never = row_of(browser, "machines", "never-seen").await;
    assert_eq!((never[1].as_str(), never[2].as_str()), ("offline", "—"));
    browser.screenshot("operations-all-parts").await;
}

/// Whether the page scrolls sideways, or any of its tables does.
const SIDEWAYS: &str = "return document.documentElement.scrollWidth > window.innerWidth \
    || [...document.querySelectorAll('.table-wrap')].some((w) => w.scrollWidth > w.clientWidth);";

/// At 390x844 no page scrolls sideways, every action lies within the
/// screen, and an input sent from the phone is saved.
async fn a_phone_sized_page_scrolls_only_down_and_reaches_every_action(
    console: &Console,
    ops: &OpsProject,
) {
    let browser = &console.browser;
    browser.resize(390, 844).await;
    let width = browser.eval("return window.innerWidth;", vec![]).await;
    assert_eq!(width, json!(390), "the viewport is a phone's");
    browser.goto(&console.api.url("/#/operations")).await;
    browser.wait_for_text("#machines", "make test").await;
    assert_eq!(
        browser.eval(SIDEWAYS, vec![]).await,
        json!(false),
        "operations"
    );
    browser.screenshot("phone-operations").await;
    browser.goto(&console.api.url("/#/agents")).await;
    browser
        .wait_for_text("#agents", &ops.held.to_string())
        .await;
    assert_eq!(browser.eval(SIDEWAYS, vec![]).await, json!(false), "agents");
    browser.screenshot("phone-agents").await;

    // Open the agent from the list, as a thumb would.
    browser
        .click(&format!("#agents a[href='#/agents/{}']", ops.held))
        .await;
    browser
        .wait_for_text("#stream-status", "stream: live")
        .await;
    browser.wait_for_text("#timeline", "input.received").await;
    assert_eq!(browser.eval(SIDEWAYS, vec![]).await, json!(false), "agent");
    let outside = browser
        .eval(
            "return ['#cancel', '#archive', '#input-text', '#input-mode', '#send', '#config-patch', '#apply-patch', \
                     '#config summary', '#sign-out'] \
                 .filter((css) => { const r = document.querySelector(css).getBoundingClientRect(); \
                                     return r.width === 0 || r.left < 0 || r.right > window.innerWidth; });",
            vec![],
        )
        .await;
    assert_eq!(outside, json!([]), "actions outside the screen");
    browser.type_into("#input-text", "sent from a phone").await;
    browser.click("#send").await;
    browser.wait_for_text("#input-status", "sent").await;
    console
        .wait_for_card("input.received", "sent from a phone")
        .await;
    browser.screenshot("phone-agent").await;
    browser.resize(1280, 900).await;
}

/// Whether the focused element shows a focus ring.
const FOCUS_RING: &str = "const e = document.activeElement; const s = getComputedStyle(e); \
    return { tag: e.tagName, id: e.id, href: e.getAttribute('href'), \
             ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2 };";

/// Press Tab until the focused element matches `css` (at most `limit`
/// presses), checking that everything focused on the way shows a ring.
async fn tab_to(browser: &Browser, css: &str, limit: usize) {
    for _ in 0..limit {
        browser.press(Key::Tab).await;
        let focused = browser.eval(FOCUS_RING, vec![]).await;
        assert_eq!(
            focused["ring"],
            json!(true),
            "no visible focus on {focused}"
        );
        let there = browser
            .eval(
                "return document.activeElement.matches(arguments[0]);",
                vec![json!(css)],
            )
            .await;
        if there == json!(true) {
            return;
        }
    }
    panic!("{css} not reached in {limit} presses of Tab");
}

/// From the list to an agent and an input sent, by Tab and Enter alone,
/// with a visible focus at every step.
async fn the_keyboard_reaches_the_list_and_the_actions_with_visible_focus(
    console: &Console,
    ops: &OpsProject,
) {
    let browser = &console.browser;
    browser.goto(&console.api.url("/#/agents")).await;
    browser
        .wait_for_text("#agents", &ops.held.to_string())
        .await;
    tab_to(browser, "#agents tbody a", 20).await;
    let href = browser
        .eval(
            "return document.activeElement.getAttribute('href');",
            vec![],
        )
        .await;
    let agent: Uuid = href
        .as_str()
        .unwrap()
        .trim_start_matches("#/agents/")
        .parse()
        .unwrap();
    browser.press(Key::Enter).await;
    browser
        .wait_for_text("#stream-status", "stream: live")
        .await;
    browser.wait_for_text("h1", &format!("Agent {agent}")).await;
    tab_to(browser, "#cancel", 3).await;
    tab_to(browser, "#input-text", 40).await;
    browser
        .client
        .active_element()
        .await
        .unwrap()
        .send_keys("sent by keyboard")
        .await
        .unwrap();
    // Past the mode dropdown (steer, the default, stays chosen).
    tab_to(browser, "#send", 2).await;
    browser.screenshot("keyboard-focus").await;
    browser.press(Key::Enter).await;
    browser.wait_for_text("#input-status", "sent").await;
    let saved: i64 = console
        .client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1 AND content = '\"sent by keyboard\"'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(saved, 1);
}

/// A double click on Send posts twice with one Idempotency-Key and the
/// agent gets one input.
async fn a_double_click_on_send_saves_one_input(console: &Console, fake: &FakeProvider) -> Uuid {
    let agent = console.new_agent(&default_config()).await;
    fake.push(Reply::text("Got it once."));
    console.open_agent(agent).await;
    // Record what the page posts: each input request's key and status. The
    // page gets the first post's answer only once the second post has left,
    // so the second click lands while the first is in flight (the case the
    // key is for) however slowly the browser delivers the clicks.
    console
        .browser
        .eval(
            "window.__inputPosts = []; const send = window.fetch; \
             let secondPosted; const second = new Promise((resolve) => { secondPosted = resolve; }); \
             window.fetch = (url, init) => { \
               let response = send.call(window, url, init); \
               if (init?.method === 'POST' && String(url).endsWith('/inputs')) { \
                 const post = { key: init.headers['Idempotency-Key'], status: null }; \
                 window.__inputPosts.push(post); \
                 response.then((r) => { post.status = r.status; }); \
                 if (window.__inputPosts.length === 1) response = response.then(async (r) => { await second; return r; }); \
                 else secondPosted(); \
               } \
               return response; };",
            vec![],
        )
        .await;
    console
        .browser
        .type_into("#input-text", "only once, please")
        .await;
    console.browser.double_click("#send").await;
    console
        .browser
        .wait_for(
            "both posts answered",
            "return window.__inputPosts.length >= 2 && window.__inputPosts.every((p) => p.status !== null);",
            vec![],
        )
        .await;
    let posts = console
        .browser
        .eval("return window.__inputPosts;", vec![])
        .await;
    let posts = posts.as_array().unwrap();
    assert_eq!(
        posts.len(),
        2,
        "the double click submitted twice: {posts:?}"
    );
    assert_eq!(posts[0]["key"], posts[1]["key"], "with one key");
    assert_eq!(posts[0]["status"], 201);
    assert_eq!(posts[1]["status"], 201, "the second is the first's replay");
    console
        .wait_for_card("model.response", "Got it once.")
        .await;
    let inputs: Vec<(Value, String)> = console
        .client
        .query(
            "SELECT content, idempotency_key FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        inputs,
        vec![(
            json!("only once, please"),
            posts[0]["key"].as_str().unwrap().to_owned()
        )]
    );
    let cards = console
        .browser
        .eval(
            "return document.querySelectorAll(\"#timeline [data-type='input.received']\").length;",
            vec![],
        )
        .await;
    assert_eq!(cards, json!(1));
    agent
}

/// A patch the API refuses with 422 names its field under the patch, marks
/// the patch invalid and changes nothing; a good patch then saves.
async fn a_refused_config_patch_is_shown_at_its_field_and_changes_nothing(
    console: &Console,
    agent: Uuid,
) {
    let config = || async {
        console
            .client
            .query_one(
                "SELECT config FROM holdfast.agents WHERE id = $1",
                &[&agent],
            )
            .await
            .unwrap()
            .get::<_, Value>(0)
    };
    let before = config().await;
    let browser = &console.browser;
    browser
        .type_into("#config-patch", r#"{"model": {"endpoint": "nowhere"}}"#)
        .await;
    browser.click("#apply-patch").await;
    browser
        .wait_for_text("#config-error", "no model endpoint named nowhere")
        .await;
    let shown = browser
        .eval(
            "const error = document.getElementById('config-error'); \
             return { field: error.dataset.field, code: error.querySelector('code.field').textContent, \
                      visible: !error.hidden, \
                      invalid: document.getElementById('config-patch').getAttribute('aria-invalid') };",
            vec![],
        )
        .await;
    assert_eq!(
        shown,
        json!({"field": "model.endpoint", "code": "model.endpoint", "visible": true, "invalid": "true"})
    );
    browser.screenshot("config-refused").await;
    assert_eq!(config().await, before, "a refused patch changes nothing");

    browser
        .type_into("#config-patch", r#"{"system": "Answer briefly."}"#)
        .await;
    browser.click("#apply-patch").await;
    browser.wait_for_text("#edit-config", "saved").await;
    let cleared = browser
        .eval(
            "return { visible: !document.getElementById('config-error').hidden, \
                      invalid: document.getElementById('config-patch').getAttribute('aria-invalid'), \
                      config: document.getElementById('config').textContent.includes('Answer briefly.') };",
            vec![],
        )
        .await;
    assert_eq!(
        cleared,
        json!({"visible": false, "invalid": null, "config": true})
    );
    assert_eq!(config().await["system"], "Answer briefly.");
}

fn question_config() -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [{"type": "ask_user"}]
    })
}

/// The pending question of `agent` (the page shows its form, so it exists).
async fn pending_question(client: &Client, agent: Uuid) -> Uuid {
    client
        .query_one(
            "SELECT id FROM holdfast.questions WHERE agent_id = $1 AND status = 'pending'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

/// An ask_user question answered on the page: the model gets the answer.
async fn a_question_answered_on_the_page_lets_the_agent_go_on(
    console: &Console,
    fake: &FakeProvider,
) -> Uuid {
    let agent = console.new_agent(&question_config()).await;
    fake.push(Reply::tool_calls(vec![(
        "ask_user",
        json!({"question": "Which colour?"}),
    )]));
    fake.push(Reply::text("Blue it is."));
    console.open_agent(agent).await;
    console.input(agent, "paint the fence").await;
    let browser = &console.browser;
    browser
        .wait_for_text("form.question h3", "Which colour?")
        .await;
    console
        .wait_for_card("question.asked", "Which colour?")
        .await;
    browser.screenshot("question").await;
    browser
        .type_into("form.question input.answer", "blue")
        .await;
    browser.click("form.question button[type=submit]").await;
    browser
        .wait_for_text("#answer-notice", "answer: sent")
        .await;
    console
        .wait_for_card("question.answered", "blue (console)")
        .await;
    console.wait_for_card("model.response", "Blue it is.").await;
    let row = console
        .client
        .query_one(
            "SELECT status, answer, answered_by FROM holdfast.questions WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            row.get::<_, String>(2)
        ),
        ("answered".into(), "blue".into(), "console".into())
    );
    agent
}

/// Someone else's answer lands first: the page shows theirs, which stands.
async fn a_question_answered_elsewhere_first_shows_as_already_answered_with_theirs(
    console: &Console,
    fake: &FakeProvider,
    agent: Uuid,
) {
    fake.push(Reply::tool_calls(vec![(
        "ask_user",
        json!({"question": "Which size?"}),
    )]));
    fake.push(Reply::text("Large it is."));
    console.input(agent, "and the size?").await;
    let browser = &console.browser;
    browser
        .wait_for_text("form.question h3", "Which size?")
        .await;
    let question = pending_question(&console.client, agent).await;
    let mut other = console.db.connect().await;
    let theirs = other.transaction().await.unwrap();
    store::answer_question(&theirs, question, "large", "someone else")
        .await
        .unwrap();
    browser
        .type_into("form.question input.answer", "small")
        .await;
    browser.click("form.question button[type=submit]").await;
    wait_for_lock_wait(&console.client, &console.db.name).await;
    theirs.commit().await.unwrap();
    browser
        .wait_for_text(
            "#answer-notice",
            r#"answer: already answered: "large" by someone else"#,
        )
        .await;
    console
        .wait_for_card("model.response", "Large it is.")
        .await;
    let answer: String = console
        .client
        .query_one(
            "SELECT answer FROM holdfast.questions WHERE id = $1",
            &[&question],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(answer, "large");
}

/// Cancel ends a waiting turn (its question with it) and Archive then
/// archives the agent, which refuses the next input with the reason shown.
async fn cancel_and_archive_from_the_page(console: &Console, fake: &FakeProvider, agent: Uuid) {
    fake.push(Reply::tool_calls(vec![(
        "ask_user",
        json!({"question": "Shall I go on?"}),
    )]));
    console.input(agent, "one more thing").await;
    let browser = &console.browser;
    browser
        .wait_for_text("form.question h3", "Shall I go on?")
        .await;
    let question = pending_question(&console.client, agent).await;
    // Cancel asks first; keeping the turn does nothing.
    browser.click("#cancel").await;
    browser
        .wait_for_text("#confirm", "Cancel the turn under way?")
        .await;
    browser.click("#confirm-keep").await;
    assert_eq!(agent_state(&console.client, agent).await, "waiting");
    browser.click("#cancel").await;
    browser.click("#confirm-cancel").await;
    browser
        .wait_for_text("#action-status", "cancel: cancelled")
        .await;
    console
        .wait_for_card("turn.cancelled", "turn.cancelled")
        .await;
    browser.wait_for_text("#agent-state", "state: idle").await;
    browser
        .wait_for(
            "the question's form to go",
            "return !document.querySelector('form.question');",
            vec![],
        )
        .await;
    let status: String = console
        .client
        .query_one(
            "SELECT status FROM holdfast.questions WHERE id = $1",
            &[&question],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "cancelled");

    browser.click("#archive").await;
    browser
        .wait_for_text("#confirm", "Archive this agent?")
        .await;
    browser.click("#confirm-archive").await;
    browser.wait_for_text("#action-status", "archived").await;
    browser
        .wait_for_text("#agent-state", "state: archived")
        .await;
    assert_eq!(agent_state(&console.client, agent).await, "archived");
    browser.type_into("#input-text", "anyone there?").await;
    browser.click("#send").await;
    browser
        .wait_for(
            "the refusal",
            "return !!document.querySelector('#input-status .error');",
            vec![],
        )
        .await;
    browser.screenshot("archived").await;
    let inputs: i64 = console
        .client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1 AND content = '\"anyone there?\"'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inputs, 0, "an archived agent takes no input");
}

/// The seqs of the timeline's cards, in page order.
async fn timeline_seqs(browser: &Browser) -> Vec<i64> {
    let seqs = browser
        .eval(
            "return [...document.querySelectorAll('#timeline [data-seq]')].map((card) => Number(card.dataset.seq));",
            vec![],
        )
        .await;
    serde_json::from_value(seqs).unwrap()
}

/// The API the page streams from restarts while a turn runs: the page
/// reconnects, catches up, and shows every event exactly once, in order.
async fn the_timeline_resumes_after_the_api_restarts_with_each_event_once(
    console: &mut Console,
    fake: &FakeProvider,
) {
    let agent = console.new_agent(&default_config()).await;
    fake.push(Reply::text("Before the restart."));
    fake.push(Reply::text("While the API was down."));
    console.open_agent(agent).await;
    console.input(agent, "first").await;
    console
        .wait_for_card("model.response", "Before the restart.")
        .await;
    console
        .wait_for_card("turn.completed", "turn.completed")
        .await;

    let (browser, client) = (&console.browser, &console.client);
    console
        .api
        .restart_after(&console.db, async {
            browser
                .wait_for_text("#stream-status", "reconnecting")
                .await;
            store::create_input(client, agent, &json!("second"), None)
                .await
                .unwrap();
            wait_for_events(client, agent, "turn.completed", 2, TURN_TIMEOUT).await;
        })
        .await;
    console
        .wait_for_card("model.response", "While the API was down.")
        .await;
    let saved: Vec<i64> = console
        .client
        .query(
            "SELECT seq FROM holdfast.events WHERE agent_id = $1 ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    console
        .browser
        .wait_for(
            "every saved event on the timeline",
            "return document.querySelectorAll('#timeline [data-seq]').length >= arguments[0];",
            vec![json!(saved.len())],
        )
        .await;
    console
        .browser
        .wait_for_text("#stream-status", "stream: live")
        .await;
    assert_eq!(
        timeline_seqs(&console.browser).await,
        saved,
        "each event once, in order"
    );
    console.browser.screenshot("resumed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_operations_phone_keyboard_and_every_action_on_an_agents_page() {
    let mut console = Console::start().await;
    // Before any worker runs: nothing but the test moves these agents.
    let ops = ops_project(&console.client).await;
    console
        .browser
        .sign_in(&console.api.url(""), &ops.key, &ops.name)
        .await;
    operations_shows_queue_workers_stuck_agents_webhooks_and_machines(&console, &ops).await;
    a_phone_sized_page_scrolls_only_down_and_reaches_every_action(&console, &ops).await;
    the_keyboard_reaches_the_list_and_the_actions_with_visible_focus(&console, &ops).await;

    console
        .sign_in_as(&console.key, &console.project_name)
        .await;
    let fake = FakeProvider::start().await;
    let _worker = console.worker("console-actions-worker", &fake);
    let agent = a_double_click_on_send_saves_one_input(&console, &fake).await;
    a_refused_config_patch_is_shown_at_its_field_and_changes_nothing(&console, agent).await;
    let asker = a_question_answered_on_the_page_lets_the_agent_go_on(&console, &fake).await;
    a_question_answered_elsewhere_first_shows_as_already_answered_with_theirs(
        &console, &fake, asker,
    )
    .await;
    cancel_and_archive_from_the_page(&console, &fake, asker).await;
    the_timeline_resumes_after_the_api_restarts_with_each_event_once(&mut console, &fake).await;
    console.browser.close().await;
}

/// An agent config with every kind of wait: `refund` needs approval,
/// `lookup` is the client's, `ask_user` asks a person, `run_command` runs
/// on `machine`; `name` in its metadata.
fn waits_config(machine: Uuid, name: &str) -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [
            {"type": "custom", "name": "refund", "input_schema": {"type": "object"}},
            {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}},
            {"type": "ask_user"},
            {"type": "run_command", "machine": machine}
        ],
        "approvals": {"require_for": ["refund"]},
        "metadata": {"name": name}
    })
}

/// Register a machine named `name` over the API: (id, token).
async fn register_machine(console: &Console, name: &str) -> (Uuid, String) {
    let response = console
        .api
        .request(reqwest::Method::POST, "/v1/machines", &console.key)
        .json(&json!({"name": name}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    (
        created["id"].as_str().unwrap().parse().unwrap(),
        created["token"].as_str().unwrap().to_owned(),
    )
}

/// The machine's daemon starts and claims what is queued for it, over the
/// API as the real daemon does: the claimed commands.
async fn daemon_claims(console: &Console, token: &str) -> Vec<Value> {
    let session = Uuid::new_v4();
    let response = console
        .api
        .request(reqwest::Method::POST, "/v1/machine/heartbeat", token)
        .json(&json!({"session": session, "started": true, "commands": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let response = console
        .api
        .request(
            reqwest::Method::POST,
            &format!("/v1/machine/commands/claim?session={session}&wait=0"),
            token,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let claimed: Value = response.json().await.unwrap();
    claimed["commands"].as_array().unwrap().clone()
}

/// The kinds of the inbox's items on the page, in order.
async fn inbox_kinds(browser: &Browser) -> Vec<String> {
    let kinds = browser
        .eval(
            "return [...document.querySelectorAll('#inbox-items .inbox-item')].map((e) => e.dataset.kind);",
            vec![],
        )
        .await;
    serde_json::from_value(kinds).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_lists_an_approval_a_question_a_tool_call_and_a_command_and_answering_each_in_place_removes_it(
) {
    let console = Console::start().await;
    let browser = &console.browser;
    let (machine, token) = register_machine(&console, "build-box").await;
    let waits = [
        ("Refunder", "refund", json!({"order": 7}), ToolKind::Custom),
        (
            "Shipper",
            "ask_user",
            json!({"question": "Ship order 7 today?"}),
            ToolKind::Question,
        ),
        (
            "Librarian",
            "lookup",
            json!({"q": "invoice 9"}),
            ToolKind::Custom,
        ),
        (
            "Builder",
            "run_command",
            json!({"command": "make test"}),
            ToolKind::Command,
        ),
    ];
    let mut agents = Vec::new();
    for (name, tool, input, kind) in waits {
        let agent = console.new_agent(&waits_config(machine, name)).await;
        waiting_tool_call(&console.client, agent, tool, input, kind).await;
        agents.push(agent);
    }

    // Signed in, the home page is the inbox, oldest first, with its count
    // in the navigation.
    console.sign_in().await;
    browser
        .wait_for(
            "four inbox items",
            "return document.querySelectorAll('#inbox-items .inbox-item').length === 4;",
            vec![],
        )
        .await;
    assert_eq!(
        inbox_kinds(browser).await,
        ["approval", "question", "tool_call", "command"]
    );
    browser.wait_for_text("#inbox-count", "4").await;
    for name in ["Refunder", "Shipper", "Librarian", "Builder"] {
        browser.wait_for_text("#inbox-items", name).await;
    }
    browser
        .wait_for_text(".inbox-item[data-kind='command']", "make test")
        .await;
    browser.screenshot_for_docs("inbox").await;
    browser.resize(390, 844).await;
    assert_eq!(browser.eval(SIDEWAYS, vec![]).await, json!(false), "inbox");
    browser.screenshot_for_docs("inbox-phone").await;
    browser.resize(1280, 900).await;

    // Approved in place, the refund now waits for the client's result.
    browser
        .click(".inbox-item[data-kind='approval'] button.approve")
        .await;
    browser.wait_for_text("#inbox-notice", "sent").await;
    browser
        .wait_for(
            "the approval gone and the refund's result asked",
            "return !document.querySelector(\".inbox-item[data-kind='approval']\") && \
                    [...document.querySelectorAll(\".inbox-item[data-kind='tool_call']\")] \
                       .some((e) => e.textContent.includes('Result for refund'));",
            vec![],
        )
        .await;
    let refund = tool_call_id(&console.client, agents[0], "refund").await;
    let refund_form = format!(".inbox-item[data-id='{refund}']");
    browser
        .type_into(&format!("{refund_form} textarea"), "{\"refunded\": true}")
        .await;
    browser
        .click(&format!("{refund_form} button[type='submit']"))
        .await;
    browser
        .type_into(".inbox-item[data-kind='question'] input.answer", "yes")
        .await;
    browser
        .click(".inbox-item[data-kind='question'] button[type='submit']")
        .await;
    let lookup = tool_call_id(&console.client, agents[2], "lookup").await;
    let lookup_form = format!(".inbox-item[data-id='{lookup}']");
    browser
        .type_into(&format!("{lookup_form} textarea"), "{\"found\": 3}")
        .await;
    browser
        .click(&format!("{lookup_form} button[type='submit']"))
        .await;
    browser
        .wait_for(
            "only the command left",
            "const items = [...document.querySelectorAll('#inbox-items .inbox-item')]; \
             return items.length === 1 && items[0].dataset.kind === 'command';",
            vec![],
        )
        .await;
    browser.wait_for_text("#inbox-count", "1").await;
    let answered: Vec<(String, Option<Value>)> = console
        .client
        .query(
            "SELECT name, output FROM holdfast.tool_calls WHERE agent_id = ANY($1) \
              AND name <> 'run_command' ORDER BY name",
            &[&agents],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        answered,
        [
            ("ask_user".to_owned(), Some(json!("yes"))),
            ("lookup".to_owned(), Some(json!({"found": 3}))),
            ("refund".to_owned(), Some(json!({"refunded": true}))),
        ]
    );

    // The machine accepts the command: it leaves the inbox on its own.
    let claimed = daemon_claims(&console, &token).await;
    assert_eq!(claimed.len(), 1);
    browser
        .wait_for_text("#inbox-total", "Nothing waits on you.")
        .await;
    assert_eq!(inbox_kinds(browser).await, Vec::<String>::new());
    browser.wait_for_text("#inbox-count", "0").await;

    // Signed out, the navigation is gone.
    browser.click("#sign-out").await;
    browser.wait_for_text("main", "Signed out.").await;
    let nav = browser
        .eval(
            "return getComputedStyle(document.getElementById('nav')).display;",
            vec![],
        )
        .await;
    assert_eq!(nav, json!("none"));
    console.browser.close().await;
}

/// Give `agent` an input and claim it, as a worker would: its turn is open.
async fn claimed_turn(client: &Client, agent: Uuid, text: &str) -> (Claim, Vec<Uuid>) {
    let input = store::create_input(client, agent, &json!(text), None)
        .await
        .unwrap();
    let claim = store::claim_agents(client, "test-worker", 10, Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.agent_id == agent)
        .expect("the agent is claimable");
    (claim, vec![input.input_id])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_agent_shows_as_failed_in_the_list_the_counts_and_its_header_and_retry_sends_its_input_again(
) {
    let console = Console::start().await;
    let browser = &console.browser;
    let mut config = default_config();
    config["metadata"] = json!({"name": "Billing bot", "team": "billing"});
    let failed = console.new_agent(&config).await;
    let (claim, inputs) = claimed_turn(&console.client, failed, "charge the card").await;
    store::fail_turn(
        &console.client,
        claim,
        "authentication_error",
        "the provider refused the key",
        &inputs,
    )
    .await
    .unwrap();
    let fine = console.new_agent(&default_config()).await;

    console.sign_in().await;
    browser.goto(&console.api.url("/#/agents")).await;
    browser.wait_for_text("#counts", "failed: 1").await;
    let rows = table_rows(browser, "agents").await;
    let row = |id: Uuid| {
        rows.iter()
            .find(|r| r[0].contains(&id.to_string()))
            .unwrap_or_else(|| panic!("no row for {id} in {rows:?}"))
            .clone()
    };
    assert_eq!(row(failed)[1], "failed", "{rows:?}");
    assert!(row(failed)[0].starts_with("Billing bot"), "{rows:?}");
    assert!(row(failed)[2].starts_with("failed"), "{rows:?}");
    assert!(row(failed)[4].contains("team=billing"), "{rows:?}");
    assert_eq!(row(fine)[1], "idle", "{rows:?}");
    browser.screenshot_for_docs("agents-failed").await;

    // The count is a link to the failed agents.
    browser.click("#counts a[data-outcome='failed']").await;
    browser
        .wait_for(
            "the failed agents only",
            "return document.querySelectorAll('#agents tbody tr').length === 1;",
            vec![],
        )
        .await;
    assert_eq!(listed_ids(browser).await.len(), 1);
    browser.wait_for_text("#agents", &failed.to_string()).await;
    // The list stays live: another agent failing joins it without a reload.
    let (claim, inputs) = claimed_turn(&console.client, fine, "send the report").await;
    store::fail_turn(&console.client, claim, "internal_error", "boom", &inputs)
        .await
        .unwrap();
    browser.wait_for_text("#counts", "failed: 2").await;
    browser.wait_for_text("#agents", &fine.to_string()).await;

    console.open_agent(failed).await;
    browser
        .wait_for_text(
            "#last-turn",
            "failed (authentication_error: the provider refused the key)",
        )
        .await;
    let header_failed = browser
        .eval(
            "return document.getElementById('last-turn').classList.contains('failed');",
            vec![],
        )
        .await;
    assert_eq!(header_failed, json!(true));
    browser
        .wait_for(
            "the failed turn marked failed",
            "return !!document.querySelector(\"details.turn.failed[data-turn='1']\");",
            vec![],
        )
        .await;
    browser.screenshot_for_docs("agent-failed").await;
    browser.click("#retry").await;
    browser.wait_for_text("#retry-status", "sent again").await;
    holdfast_tests::wait_until(TURN_TIMEOUT, "the input sent again", || async {
        count_events(&console.client, failed, "input.received").await == 2
    })
    .await;
    let contents: Vec<Value> = console
        .client
        .query(
            "SELECT content FROM holdfast.inputs WHERE agent_id = $1 ORDER BY created_at",
            &[&failed],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        contents,
        [json!("charge the card"), json!("charge the card")]
    );
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_shows_its_duration_tokens_and_cost_and_the_agent_its_usage() {
    let console = Console::start().await;
    let browser = &console.browser;
    store::set_model_price(
        &console.client,
        &NewModelPrice {
            provider: "anthropic",
            model: "claude-test",
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
            cache_read_usd_per_mtok: None,
            cache_write_usd_per_mtok: None,
        },
    )
    .await
    .unwrap();
    let agent = console.new_agent(&default_config()).await;
    let (claim, inputs) = claimed_turn(&console.client, agent, "sum the invoices").await;
    store::commit_model_step(
        &console.client,
        claim,
        &ModelStep {
            input_ids: inputs,
            message: vec![
                json!({"type": "text", "text": "## Total\n\nThe invoices sum to **42**."}),
            ],
            tool_calls: vec![],
            usage: json!({"input_tokens": 1000, "output_tokens": 500}),
            stop_reason: Some("end_turn".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();
    let took: f64 = console
        .client
        .query_one(
            "SELECT extract(epoch FROM e.created_at - s.created_at)::float8 * 1000 \
               FROM holdfast.events s, holdfast.events e \
              WHERE s.agent_id = $1 AND e.agent_id = $1 \
                AND s.type = 'turn.started' AND e.type = 'turn.completed'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);

    console.sign_in().await;
    console.open_agent(agent).await;
    let summary = "details.turn[data-turn='1'] > summary";
    browser.wait_for_text(summary, "completed").await;
    browser
        .wait_for_text(summary, "1,500 tokens · $0.0105")
        .await;
    browser.wait_for_text(summary, "sum the invoices").await;
    // The page reads times to the millisecond, the database to the
    // microsecond: the duration shown is the saved one within 1 ms.
    let shown = browser.text(&format!("{summary} .turn-duration")).await;
    let shown_ms = match shown.split_once(' ') {
        Some((n, "ms")) => n.parse::<f64>().unwrap(),
        Some((n, "s")) => n.parse::<f64>().unwrap() * 1000.0,
        _ => panic!("not a duration: {shown:?}"),
    };
    let tolerance = if took < 1000.0 { 1.5 } else { 100.0 };
    assert!(
        (shown_ms - took).abs() <= tolerance,
        "the turn took {took} ms, the page shows {shown:?}"
    );
    browser
        .wait_for_text("#last-turn", "Last turn 1: completed")
        .await;
    browser
        .wait_for_text("#usage-total", "1,500 tokens · $0.0105")
        .await;
    // An answer's heading reads larger than its text.
    let sizes = browser
        .eval(
            "const h = document.querySelector('.model-text h4'); const p = document.querySelector('.model-text p'); \
             return parseFloat(getComputedStyle(h).fontSize) > parseFloat(getComputedStyle(p).fontSize);",
            vec![],
        )
        .await;
    assert_eq!(sizes, json!(true));
    browser
        .eval(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
            vec![json!("details.turn")],
        )
        .await;
    browser.screenshot_for_docs("agent-turn").await;

    // The project's usage page: by model and by day.
    browser.goto(&console.api.url("/#/usage")).await;
    browser
        .wait_for_text("#usage-models", "anthropic claude-test")
        .await;
    let by_day = row_of(
        browser,
        "usage-days-table",
        &Utc::now().date_naive().to_string(),
    )
    .await;
    assert_eq!(by_day[1], "anthropic claude-test");
    assert_eq!(by_day[2], "1");
    assert_eq!(by_day[3], "1,500 tokens · $0.0105");
    browser.screenshot_for_docs("usage").await;
    console.browser.close().await;
}

/// `holdfast machine run` for `token`: its journal in `dir/state`, its
/// commands run in `dir/work` (in its sandbox), heartbeating every 200 ms.
fn machine_daemon(console: &Console, token: &str, dir: &Path) -> HoldfastProcess {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    HoldfastProcess::spawn(
        "console-machine",
        &["machine", "run"],
        &[
            ("HOLDFAST_URL", console.api.url("")),
            ("HOLDFAST_MACHINE_TOKEN", token.to_owned()),
            (
                "HOLDFAST_MACHINE_STATE_DIR",
                dir.join("state").display().to_string(),
            ),
            ("HOLDFAST_MACHINE_WORK_DIR", work.display().to_string()),
            ("HOLDFAST_MACHINE_HEARTBEAT_INTERVAL", "200ms".into()),
            ("HOLDFAST_MACHINE_CLAIM_WAIT", "2s".into()),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commands_output_appears_as_terminal_text_on_the_open_page_while_it_runs_and_ends() {
    let console = Console::start().await;
    let browser = &console.browser;
    let (machine, token) = register_machine(&console, "build-box").await;
    let agent = console.new_agent(&waits_config(machine, "Builder")).await;
    // It prints a line, colours and markup, a bell and a title change, then
    // waits (at most a minute) for the test's `release` file.
    let command = "printf 'first line\\n'; printf '\\033[31mred\\033[0m <b>not bold</b>\\007\\033]0;title\\007\\n' >&2; \
                   i=0; while [ ! -e release ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo done";
    waiting_tool_call(
        &console.client,
        agent,
        "run_command",
        json!({"command": command}),
        ToolKind::Command,
    )
    .await;
    console.sign_in().await;
    console.open_agent(agent).await;
    browser
        .wait_for_text(".command .command-status", "queued on build-box")
        .await;

    let dir = holdfast_tests::ScratchDir::new("console-machine");
    let _daemon = machine_daemon(&console, &token, &dir);
    browser
        .wait_for_text(".command .command-status", "running")
        .await;
    browser
        .wait_for_text(".command pre.stdout", "first line")
        .await;
    browser
        .wait_for_text(".command pre.stderr", "red <b>not bold</b>")
        .await;
    // Still running: the output came live, not with the result.
    let state: String = console
        .client
        .query_one(
            "SELECT state FROM holdfast.commands WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "accepted");
    let terminal = browser
        .eval(
            "const card = document.querySelector('.command'); \
             return { stdout: card.querySelector('pre.stdout').textContent, \
                      stderr: card.querySelector('pre.stderr').textContent, \
                      elements: card.querySelectorAll('pre.stdout *, pre.stderr *').length, \
                      bold: card.querySelectorAll('b').length, \
                      title: document.title, \
                      status: card.querySelector('.command-status').textContent };",
            vec![],
        )
        .await;
    assert_eq!(terminal["stdout"], json!("first line\n"), "{terminal}");
    // Escape sequences removed, the bell shown as U+FFFD, markup as text.
    assert_eq!(
        terminal["stderr"],
        json!("red <b>not bold</b>\u{FFFD}\n"),
        "{terminal}"
    );
    assert_eq!(
        terminal["elements"],
        json!(0),
        "output is text, never markup"
    );
    assert_eq!(terminal["bold"], json!(0), "{terminal}");
    assert_eq!(terminal["title"], json!("Holdfast console"), "{terminal}");
    assert_eq!(terminal["status"], json!("running"), "{terminal}");
    browser
        .eval(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
            vec![json!(".command")],
        )
        .await;
    browser.screenshot_for_docs("agent-command-live").await;
    browser.resize(390, 844).await;
    browser
        .eval(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
            vec![json!(".command")],
        )
        .await;
    browser
        .screenshot_for_docs("agent-command-live-phone")
        .await;
    browser.resize(1280, 900).await;

    // Released, it ends: the saved output replaces the live one.
    std::fs::write(dir.join("work").join("release"), b"").unwrap();
    browser
        .wait_for_text(".command .command-status", "exit 0 · ")
        .await;
    let terminal = browser
        .eval(
            "const card = document.querySelector('.command'); \
             return { stdout: card.querySelector('pre.stdout').textContent, \
                      stderr: card.querySelector('pre.stderr').textContent, \
                      elements: card.querySelectorAll('pre.stdout *, pre.stderr *').length };",
            vec![],
        )
        .await;
    assert_eq!(
        terminal["stdout"],
        json!("first line\ndone\n"),
        "{terminal}"
    );
    assert_eq!(
        terminal["stderr"],
        json!("red <b>not bold</b>\u{FFFD}\n"),
        "{terminal}"
    );
    assert_eq!(terminal["elements"], json!(0), "{terminal}");
    browser
        .eval(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
            vec![json!(".command")],
        )
        .await;
    browser.screenshot_for_docs("agent-command").await;
    console.browser.close().await;
}

/// Claim `agent` as a worker would (it is ready).
async fn claim(client: &Client, agent: Uuid) -> Claim {
    store::claim_agents(client, "test-worker", 10, Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.agent_id == agent)
        .expect("the agent is claimable")
}

/// From now on this session's `holdfast.now()`, and so the time of the
/// events it writes, is `seconds` ahead of the clock.
async fn clock_ahead(client: &Client, seconds: u32) {
    client
        .batch_execute(&format!("SET holdfast.clock_offset = '{seconds} seconds'"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expanded_turn_shows_its_steps_as_a_waterfall_with_a_retried_model_call_as_attempts() {
    let console = Console::start().await;
    let browser = &console.browser;
    let client = &console.client;
    let agent = console.new_agent(&tools_config()).await;
    // 0 s: the turn starts. 1 s: the first model call fails (overloaded)
    // and is retried at once. 4 s: the second attempt answers with a
    // `lookup` call. 6 s: the lookup's result. 7 s: the final answer.
    let (first, inputs) = claimed_turn(client, agent, "find invoice 9").await;
    clock_ahead(client, 1).await;
    let retrying = store::commit_model_retry(
        client,
        first,
        &json!({"type": "overloaded_error", "message": "the model is busy"}),
        Duration::ZERO,
        5,
        &inputs,
    )
    .await
    .unwrap();
    assert!(retrying);
    let second = claim(client, agent).await;
    clock_ahead(client, 4).await;
    store::commit_model_step(
        client,
        second,
        &ModelStep {
            input_ids: inputs,
            message: vec![
                json!({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "invoice 9"}}),
            ],
            tool_calls: vec![holdfast_wire::domain::NewToolCall {
                provider_id: "toolu_1".into(),
                name: "lookup".into(),
                input: json!({"q": "invoice 9"}),
                kind: ToolKind::Custom,
            }],
            usage: json!({"input_tokens": 10, "output_tokens": 5}),
            stop_reason: Some("tool_use".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();
    clock_ahead(client, 6).await;
    let lookup = tool_call_id(client, agent, "lookup").await;
    store::submit_tool_result(client, lookup, &json!({"found": true}), false)
        .await
        .unwrap();
    let third = claim(client, agent).await;
    clock_ahead(client, 7).await;
    store::commit_model_step(
        client,
        third,
        &ModelStep {
            input_ids: vec![],
            message: vec![json!({"type": "text", "text": "Invoice 9 is paid."})],
            tool_calls: vec![],
            usage: json!({"input_tokens": 20, "output_tokens": 5}),
            stop_reason: Some("end_turn".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();

    console.sign_in().await;
    console.open_agent(agent).await;
    let steps = "details.turn[data-turn='1'] .waterfall .step";
    browser
        .wait_for(
            "the turn's waterfall",
            "return document.querySelectorAll(arguments[0]).length === 5;",
            vec![json!(steps)],
        )
        .await;
    let rows = browser
        .eval(
            "return [...document.querySelectorAll(arguments[0])].map((row) => ({ \
                 label: row.querySelector('.step-label').textContent, \
                 kind: row.className, \
                 start: Number(row.dataset.startMs), \
                 duration: Number(row.dataset.durationMs), \
                 shown: row.querySelector('.step-duration').textContent, \
                 left: row.querySelector('.bar').getBoundingClientRect().left \
                     - row.querySelector('.track').getBoundingClientRect().left, \
                 width: row.querySelector('.bar').getBoundingClientRect().width, \
                 track: row.querySelector('.track').getBoundingClientRect().width }));",
            vec![json!(steps)],
        )
        .await;
    let rows = rows.as_array().unwrap();
    let labels: Vec<&str> = rows.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        [
            "Model call, 2 attempts",
            "attempt 1: overloaded_error: the model is busy",
            "attempt 2: answered",
            "Tool lookup",
            "Model call",
        ],
        "{rows:?}"
    );
    // Starts and durations from the saved events' times, in ms since the
    // turn started: the first attempt from the turn's start to its retry,
    // the second from the retry (no delay) to the answer, the tool call
    // from its creation to its result, the last call from the result to
    // the final answer.
    let at: Vec<(String, f64)> = client
        .query(
            "SELECT e.type, extract(epoch FROM e.created_at - s.created_at)::float8 * 1000 \
               FROM holdfast.events e, holdfast.events s \
              WHERE e.agent_id = $1 AND s.agent_id = $1 AND s.type = 'turn.started' \
              ORDER BY e.seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let time = |kind: &str, nth: usize| {
        at.iter()
            .filter(|(k, _)| k == kind)
            .nth(nth)
            .unwrap_or_else(|| panic!("no {kind} #{nth} in {at:?}"))
            .1
    };
    let (retry, answer) = (time("model.retry", 0), time("model.response", 0));
    let (result, last) = (time("tool_call.completed", 0), time("model.response", 1));
    let expected = [
        (0.0, answer),
        (0.0, retry),
        (retry, answer - retry),
        (
            time("tool_call.created", 0),
            result - time("tool_call.created", 0),
        ),
        (result, last - result),
    ];
    let shown: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| {
            (
                r["start"].as_f64().unwrap(),
                r["duration"].as_f64().unwrap(),
            )
        })
        .collect();
    // The page reads times to the millisecond, the database to the microsecond.
    for (row, ((start, took), (want_start, want_took))) in shown.iter().zip(expected).enumerate() {
        assert!(
            (start - want_start).abs() <= 1.5 && (took - want_took).abs() <= 1.5,
            "row {row}: {start}+{took} ms, saved {want_start}+{want_took} ms: {rows:?}"
        );
    }
    // The clock was set 1, 4, 6 and 7 s ahead: the durations are about 1, 3,
    // 2 and 1 s whatever the test's own pace.
    assert!(
        (retry - 1000.0).abs() < 500.0 && (answer - retry - 3000.0).abs() < 500.0,
        "{at:?}"
    );
    // Each bar is as wide as its step lasted, and starts where it started,
    // on the one axis of the turn (which ends with the last answer).
    for row in rows {
        let track = row["track"].as_f64().unwrap();
        let width = row["width"].as_f64().unwrap() / track;
        let left = row["left"].as_f64().unwrap() / track;
        let expected_width = row["duration"].as_f64().unwrap() / last;
        let expected_left = row["start"].as_f64().unwrap() / last;
        assert!(
            (width - expected_width).abs() < 0.005 && (left - expected_left).abs() < 0.005,
            "{row}: bar at {left:.3}+{width:.3} of the track, expected {expected_left:.3}+{expected_width:.3}"
        );
    }
    assert!(
        rows[1]["kind"].as_str().unwrap().contains("kind-failed"),
        "the failed attempt is marked: {rows:?}"
    );
    let second = rows[2]["duration"].as_f64().unwrap() / 1000.0;
    assert!(
        rows[2]["shown"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{second:.1} s")),
        "{rows:?}"
    );
    browser
        .eval(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'start'});",
            vec![json!("details.turn[data-turn='1']")],
        )
        .await;
    browser.screenshot_for_docs("agent-waterfall").await;
    browser.resize(390, 844).await;
    browser
        .eval(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'start'});",
            vec![json!("details.turn[data-turn='1']")],
        )
        .await;
    browser.screenshot_for_docs("agent-waterfall-phone").await;
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_approval_waits_in_the_inbox_and_approving_it_in_place_removes_it() {
    let console = Console::start().await;
    let browser = &console.browser;
    let client = &console.client;
    // A turn past its token budget, asking: its first call used 20 tokens
    // of 10, and before the next the worker asks for the budget.
    let agent = console
        .new_agent(&json!({
            "model": {"provider": "anthropic", "name": "claude-test"},
            "tools": [{"type": "custom", "name": "lookup", "input_schema": {"type": "object"}}],
            "budget": {"max_tokens_per_turn": 10, "on_exceeded": "ask"},
            "metadata": {"name": "Spender"}
        }))
        .await;
    let (first, inputs) = claimed_turn(client, agent, "look it up").await;
    store::commit_model_step(
        client,
        first,
        &ModelStep {
            input_ids: inputs,
            message: vec![
                json!({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}),
            ],
            tool_calls: vec![holdfast_wire::domain::NewToolCall {
                provider_id: "toolu_1".into(),
                name: "lookup".into(),
                input: json!({}),
                kind: ToolKind::Custom,
            }],
            usage: json!({"input_tokens": 15, "output_tokens": 5}),
            stop_reason: Some("tool_use".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();
    let lookup = tool_call_id(client, agent, "lookup").await;
    store::submit_tool_result(client, lookup, &json!({"found": true}), false)
        .await
        .unwrap();
    let second = claim(client, agent).await;
    store::end_turn_over_budget(client, second, &[])
        .await
        .unwrap();

    console.sign_in().await;
    browser.goto(&console.api.url("/#/inbox")).await;
    let card = "#inbox-items .inbox-item[data-kind='budget_approval']";
    browser
        .wait_for_text(card, "Continue past max_tokens_per_turn")
        .await;
    browser.wait_for_text(card, "Spender").await;
    assert_eq!(inbox_kinds(browser).await, ["budget_approval"]);
    browser.wait_for_text("#inbox-count", "1").await;
    browser
        .type_into(&format!("{card} input"), "worth it")
        .await;
    browser.click(&format!("{card} button.approve")).await;
    browser.wait_for_text("#inbox-notice", "sent").await;
    browser
        .wait_for(
            "the budget approval gone from the inbox",
            "return !document.querySelector(arguments[0]);",
            vec![json!(card)],
        )
        .await;
    browser
        .wait_for_text("#inbox-total", "Nothing waits on you.")
        .await;
    let row = client
        .query_one(
            "SELECT status, decided_by, reason FROM holdfast.approvals WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    let decided: (String, Option<String>, Option<String>) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        decided,
        (
            "approved".to_owned(),
            Some("console".to_owned()),
            Some("worth it".to_owned())
        )
    );
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_failed_input_that_carried_an_image_sends_it_again_with_its_attachment() {
    let console = Console::start().await;
    let browser = &console.browser;
    let agent = console.new_agent(&default_config()).await;
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    console
        .api
        .request(
            reqwest::Method::POST,
            &format!("/v1/agents/{agent}/inputs"),
            &console.key,
        )
        .json(&json!({"content": [
            {"type": "text", "text": "describe this"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
        ]}))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    let claim = claim(&console.client, agent).await;
    let inputs: Vec<Uuid> = console
        .client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    store::fail_turn(
        &console.client,
        claim,
        "invalid_request_error",
        "the provider refused the image",
        &inputs,
    )
    .await
    .unwrap();

    console.sign_in().await;
    console.open_agent(agent).await;
    browser.wait_for_text("#last-turn", "failed").await;
    browser
        .wait_for(
            "the thumbnail loaded",
            "const img = document.querySelector('#timeline img.thumb'); \
             return !!img && img.complete && img.naturalWidth === 1;",
            vec![],
        )
        .await;
    browser.click("#retry").await;
    browser.wait_for_text("#retry-status", "sent again").await;
    holdfast_tests::wait_until(TURN_TIMEOUT, "the input sent again", || async {
        count_events(&console.client, agent, "input.received").await == 2
    })
    .await;
    let rows = console
        .client
        .query(
            "SELECT content FROM holdfast.inputs WHERE agent_id = $1 ORDER BY created_at",
            &[&agent],
        )
        .await
        .unwrap();
    let contents: Vec<Value> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(contents.len(), 2);
    assert_eq!(
        contents[1], contents[0],
        "the same text and the same attachment"
    );
    assert_eq!(
        contents[1][1]["source"]["type"], "attachment",
        "{contents:?}"
    );
    let attachments: i64 = console
        .client
        .query_one(
            "SELECT count(*) FROM holdfast.attachments WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(attachments, 1, "the file is stored once");
    // The new input shows its thumbnail too.
    browser
        .wait_for(
            "two thumbnails",
            "return document.querySelectorAll('#timeline img.thumb').length === 2;",
            vec![],
        )
        .await;
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_box_finds_an_agent_by_a_word_only_in_its_answer() {
    let console = Console::start().await;
    let browser = &console.browser;
    let client = &console.client;
    let mut config = default_config();
    config["metadata"] = json!({"name": "Ledger bot"});
    let answers = console.new_agent(&config).await;
    let (turn, inputs) = claimed_turn(client, answers, "how do the books look?").await;
    store::commit_model_step(
        client,
        turn,
        &ModelStep {
            input_ids: inputs,
            message: vec![json!({"type": "text", "text": "The **reconciliation** is done."})],
            tool_calls: vec![],
            usage: json!({"input_tokens": 1, "output_tokens": 1}),
            stop_reason: Some("end_turn".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();
    let other = console.new_agent(&default_config()).await;
    console.input(other, "hello").await;

    console.sign_in().await;
    browser.goto(&console.api.url("/#/agents")).await;
    browser.wait_for_text("#agents", &other.to_string()).await;
    browser.type_into("#search", "reconciliation").await;
    browser.click("#apply-filter").await;
    browser
        .wait_for(
            "the one agent that said it",
            "return document.querySelectorAll('#agents tbody tr').length === 1 \
                 && document.querySelector('#agents tbody').textContent.includes(arguments[0]);",
            vec![json!(answers.to_string())],
        )
        .await;
    let listed = listed_ids(browser).await;
    assert_eq!(listed, [format!("Ledger bot {answers}")]);
    browser.screenshot_for_docs("agents-search").await;
    browser.resize(390, 844).await;
    // On a phone the page scrolls only down.
    let wider = browser
        .eval(
            "return document.documentElement.scrollWidth > window.innerWidth;",
            vec![],
        )
        .await;
    assert_eq!(wider, json!(false));
    browser.screenshot_for_docs("agents-search-phone").await;
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dark_mode_follows_the_system_setting() {
    let console = Console::start().await;
    let browser = &console.browser;
    let agent = console.new_agent(&default_config()).await;
    console.input(agent, "hello in the dark").await;
    console.sign_in().await;
    let background = "return getComputedStyle(document.body).backgroundColor;";
    browser.emulate_color_scheme("dark").await;
    assert_eq!(
        browser.eval(background, vec![]).await,
        json!("rgb(13, 17, 23)")
    );
    console.open_agent(agent).await;
    console
        .wait_for_card("input.received", "hello in the dark")
        .await;
    browser.screenshot_for_docs("agent-dark").await;
    browser.emulate_color_scheme("light").await;
    assert_eq!(
        browser.eval(background, vec![]).await,
        json!("rgb(255, 255, 255)")
    );
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_does_not_replay_into_an_aria_live_region_and_new_events_are_announced() {
    let console = Console::start().await;
    let browser = &console.browser;
    let agent = console.new_agent(&default_config()).await;
    console.input(agent, "an old message from history").await;
    console.sign_in().await;
    console.open_agent(agent).await;
    console
        .wait_for_card("input.received", "an old message from history")
        .await;
    let live_text = "return [...document.querySelectorAll('[aria-live]')] \
                        .filter((e) => e.getAttribute('aria-live') !== 'off') \
                        .map((e) => e.textContent).join('|');";
    let spoken = browser.eval(live_text, vec![]).await;
    assert!(
        !spoken.as_str().unwrap().contains("an old message"),
        "the history is in a live region: {spoken}"
    );
    let timeline_live = browser
        .eval(
            "return document.getElementById('timeline').closest('[aria-live]') !== null;",
            vec![],
        )
        .await;
    assert_eq!(timeline_live, json!(false));
    // A new event is announced, briefly.
    console.input(agent, "a new message").await;
    console
        .wait_for_card("input.received", "a new message")
        .await;
    browser.wait_for_text("#announcer", "Input").await;
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_text_keeps_its_line_breaks_and_a_cancelled_partial_answer_stays_marked() {
    let console = Console::start().await;
    let browser = &console.browser;
    let agent = console.new_agent(&default_config()).await;
    console.sign_in().await;
    console.open_agent(agent).await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("First line\n\n- an item and the rest never comes").hold_after_deltas(4));
    let _worker = console.worker("console-partial-worker", &fake);
    console.input(agent, "write a list").await;
    fake.wait_until_held(1).await;

    // The streamed text is markdown as it comes: a paragraph, then a list.
    browser
        .wait_for(
            "the streamed list item",
            "const li = document.querySelector('#live-text .delta-text li'); \
             const p = document.querySelector('#live-text .delta-text p'); \
             return !!li && li.textContent.startsWith('an') && !!p && p.textContent === 'First line';",
            vec![],
        )
        .await;
    browser.click("#cancel").await;
    browser.click("#confirm-cancel").await;
    wait_for_event(&console.client, agent, "turn.cancelled", TURN_TIMEOUT).await;
    browser
        .wait_for_text(".card.partial h3", "Partial answer, cancelled (not saved)")
        .await;
    let partial = browser.text(".card.partial .model-text").await;
    assert!(partial.contains("First line"), "{partial}");
    let live_hidden = browser
        .eval(
            "return document.getElementById('live-text').hidden;",
            vec![],
        )
        .await;
    assert_eq!(live_hidden, json!(true));
    assert_eq!(
        count_events(&console.client, agent, "model.response").await,
        0,
        "nothing of the call was saved"
    );
    fake.release();
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_input_shows_as_a_thumbnail_fetched_with_the_key() {
    let console = Console::start().await;
    let browser = &console.browser;
    let agent = console.new_agent(&default_config()).await;
    // A 1x1 PNG.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    console
        .api
        .request(
            reqwest::Method::POST,
            &format!("/v1/agents/{agent}/inputs"),
            &console.key,
        )
        .json(&json!({"content": [
            {"type": "text", "text": "what is in this picture?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
        ]}))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    console.sign_in().await;
    console.open_agent(agent).await;
    browser
        .wait_for(
            "the thumbnail loaded",
            "const img = document.querySelector('#timeline img.thumb'); \
             return !!img && img.complete && img.naturalWidth === 1;",
            vec![],
        )
        .await;
    let src = browser
        .eval(
            "return document.querySelector('#timeline img.thumb').getAttribute('src');",
            vec![],
        )
        .await;
    assert_eq!(
        src,
        json!(format!("data:image/png;base64,{png}")),
        "the image came from the attachment route, with the key in a header"
    );
    console
        .wait_for_card("input.received", "what is in this picture?")
        .await;
    console.browser.close().await;
}

/// The ids of an agent's queued inputs, in the order turns will take them.
async fn queue_order(client: &Client, agent: Uuid) -> Vec<Uuid> {
    store::list_inputs(client, agent, holdfast_wire::domain::WaitingInputs::Queued)
        .await
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_page_moves_promotes_and_cancels_queued_inputs_and_pauses_resumes_and_deletes_schedules(
) {
    use holdfast_wire::domain::InputMode;
    let console = Console::start().await;
    let agent = console.new_agent(&default_config()).await;
    // A turn no worker runs keeps the queue waiting.
    console.input(agent, "opening").await;
    let mut queued = Vec::new();
    for text in ["alpha", "beta", "gamma"] {
        let created = store::create_traced_input(
            &console.client,
            agent,
            &json!(text),
            None,
            None,
            InputMode::Queue,
        )
        .await
        .unwrap();
        queued.push(created.input_id);
    }
    let schedule: Value = console
        .api
        .request(
            reqwest::Method::POST,
            &format!("/v1/agents/{agent}/schedules"),
            &console.key,
        )
        .json(&json!({"every": "1h", "input": {"content": "hourly check"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    console.sign_in().await;
    console.open_agent(agent).await;
    console.browser.wait_for_text("#backlog", "queued 3").await;

    // alpha down one: beta, alpha, gamma.
    console
        .browser
        .click("#backlog button[aria-label='Down: alpha']")
        .await;
    console
        .browser
        .wait_for_text("#backlog-status", "moved down")
        .await;
    assert_eq!(
        queue_order(&console.client, agent).await,
        [queued[1], queued[0], queued[2]]
    );
    // gamma promoted into the turn, beta cancelled.
    console
        .browser
        .click("#backlog button[aria-label='Promote: gamma']")
        .await;
    console
        .browser
        .wait_for_text("#backlog-status", "promoted")
        .await;
    console
        .browser
        .click("#backlog button[aria-label='Cancel: beta']")
        .await;
    console
        .browser
        .wait_for_text("#backlog-status", "cancelled")
        .await;
    assert_eq!(queue_order(&console.client, agent).await, [queued[0]]);
    console
        .browser
        .wait_for_text("#backlog", "in the turn · gamma")
        .await;

    // The schedule: paused, resumed, deleted.
    console
        .browser
        .wait_for_text("#schedules", "every 1h")
        .await;
    console
        .browser
        .click("#schedules button[aria-label='Pause every 1h']")
        .await;
    console
        .browser
        .wait_for_text("#schedules-table", "paused")
        .await;
    console
        .browser
        .click("#schedules button[aria-label='Resume every 1h']")
        .await;
    console
        .browser
        .wait_for_text("#schedules-table", "active")
        .await;
    console
        .browser
        .click("#schedules button[aria-label='Delete every 1h']")
        .await;
    console
        .browser
        .wait_for_text("#schedules-status", "deleted")
        .await;
    let left: i64 = console
        .client
        .query_one(
            "SELECT count(*) FROM holdfast.schedules WHERE id = $1::text::uuid",
            &[&schedule["id"].as_str().unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    console.browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_here_opens_the_fork_and_a_replay_shows_beside_its_source_with_the_divergence_marked()
{
    let console = Console::start().await;
    let fake = FakeProvider::start().await;
    let _worker = console.worker("console-replay-worker", &fake);
    let agent = console
        .new_agent(
            &json!({"model": {"provider": "anthropic", "name": "claude-test"},
                           "tools": [{"type": "custom", "name": "lookup"}]}),
        )
        .await;
    fake.push(Reply::text("Hello there."));
    console.input(agent, "hello").await;
    wait_for_event(&console.client, agent, "turn.completed", TURN_TIMEOUT).await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]));
    fake.push(Reply::text("A-7 shipped."));
    console.input(agent, "where is A-7?").await;
    answer_waiting_call(&console.client, agent, json!("shipped")).await;
    wait_for_events(&console.client, agent, "turn.completed", 2, TURN_TIMEOUT).await;

    console.sign_in().await;
    console.open_agent(agent).await;
    console
        .wait_for_card("model.response", "Hello there.")
        .await;
    // "Fork here" on the first answer: the fork opens, forked from there.
    let first_answer: i64 = console
        .client
        .query_one(
            "SELECT seq FROM holdfast.events WHERE agent_id = $1 AND type = 'model.response' ORDER BY seq LIMIT 1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    console
        .browser
        .eval(
            "document.querySelector(`.fork-here[data-fork-seq='${arguments[0]}']`).click();",
            vec![json!(first_answer)],
        )
        .await;
    console
        .browser
        .wait_for_text("#forked-from", &format!("at event #{first_answer}"))
        .await;
    let fork: Uuid = console
        .client
        .query_one(
            "SELECT id FROM holdfast.agents WHERE forked_from_agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let url = console.browser.eval("return location.hash;", vec![]).await;
    assert_eq!(url, json!(format!("#/agents/{fork}")));
    console
        .browser
        .wait_for_text("#forked-from", &agent.to_string())
        .await;
    console.browser.screenshot("forked").await;

    // A replay from the source's page: turn two's model looks up another
    // order, which the recording does not have.
    fake.push(Reply::text("Hello there."));
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "B-9"}))]));
    fake.push(Reply::text("I could not find it."));
    // Back to the source by the fork's link to it.
    console.browser.click("#forked-from a").await;
    console
        .browser
        .wait_for_text("h1", &agent.to_string())
        .await;
    console
        .browser
        .wait_for_text("#stream-status", "stream: live")
        .await;
    console
        .browser
        .type_into("#replay-config", r#"{"model": {"name": "claude-next"}}"#)
        .await;
    console
        .browser
        .click("#replay-form button[type=submit]")
        .await;
    console
        .browser
        .wait_for_text("#replay-status", "completed")
        .await;
    let rows = table_rows(&console.browser, "replay-turns").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0][1], "Hello there.");
    assert_eq!(rows[0][2], "Hello there.");
    assert_eq!(rows[0][5], "same");
    assert_eq!(rows[1][2], "I could not find it.");
    assert!(rows[1][5].contains("diverged at call 1"), "{rows:?}");
    let marked = console
        .browser
        .eval(
            "return [...document.querySelectorAll('#replay-turns tbody tr')].map((tr) => tr.classList.contains('diverged'));",
            vec![],
        )
        .await;
    assert_eq!(marked, json!([false, true]));
    console
        .browser
        .wait_for_text("#replay-status", "1 equal, 1 diverged")
        .await;
    console.browser.screenshot("replay").await;
    console.browser.close().await;
}
