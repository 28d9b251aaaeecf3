//! The web console in a real headless Chromium (WebDriver), against a real
//! API server, a real `holdfast worker` process and the fake model provider
//! speaking the Anthropic wire protocol: sign in, live deltas before the
//! answer is saved, the operations page, approving and answering from the page, a 409 when
//! someone else answered first, model output that holds markup, and the
//! agent list over 1,000 agents. Each test saves a screenshot to
//! target/console-screenshots/.
//!
//! Without Chromium and chromedriver these tests print SKIPPED and pass,
//! except under `CI=true`, where they fail (see `holdfast_tests::browser`).

use std::collections::HashSet;
use std::time::Duration;

use holdfast_engine::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::browser::Browser;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{count_events, spawn_worker, wait_for_event};
use holdfast_tests::{default_config, wait_for_lock_wait, TestDb};
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
    async fn start() -> Option<Console> {
        let browser = Browser::start().await?;
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
        Some(Console {
            browser,
            db,
            client,
            api,
            project,
            project_name,
            key,
        })
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
    let Some(console) = Console::start().await else {
        return;
    };
    let agent = console.new_agent(&default_config()).await;
    console.sign_in().await;
    console.open_agent(agent).await;

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
    let Some(console) = Console::start().await else {
        return;
    };
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
    let Some(console) = Console::start().await else {
        return;
    };
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
    let Some(console) = Console::start().await else {
        return;
    };
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
    let Some(console) = Console::start().await else {
        return;
    };
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
    console.sign_in().await;
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
            "return [...new Set([...document.querySelectorAll('#agents tbody td.state')].map((td) => td.textContent))];",
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
