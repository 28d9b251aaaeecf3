//! The SQL recipes of docs/sql.md, run as written: releasing a stuck agent
//! by hand fences its holder and never reruns a tool; trimming events
//! removes only the timelines of agents archived long ago, with their
//! webhook deliveries; a retention pass prunes only finished agents past
//! their project's retention.

use std::time::Duration;

use holdfast_db::{store, Error};
use holdfast_tests::{default_config, project_and_agent, TestDb};
use holdfast_wire::domain::{Claim, ModelStep, NewToolCall, ToolKind};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);

/// The SQL block after `<!-- recipe: NAME -->` in docs/sql.md.
fn recipe(name: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/sql.md"))
        .expect("read docs/sql.md");
    let marker = format!("<!-- recipe: {name} -->");
    let after = &doc[doc.find(&marker).expect("the recipe is in docs/sql.md") + marker.len()..];
    let start = after.find("```sql\n").expect("a sql block follows") + "```sql\n".len();
    let end = after[start..].find("```").expect("the block ends") + start;
    after[start..end].to_owned()
}

/// A recipe with its psql variable `:'agent'` bound (and `\set` dropped).
fn with_agent(sql: &str, agent: Uuid) -> String {
    sql.lines()
        .filter(|line| !line.starts_with("\\set"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(":'agent'", &format!("'{agent}'"))
}

async fn lease_epoch(client: &Client, agent: Uuid) -> i64 {
    client
        .query_one(
            "SELECT lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_stuck_agent_by_the_recipe_fences_its_holder_and_reruns_nothing() {
    let db = TestDb::new().await;
    let wedged = db.connect().await;
    let dba = db.connect().await;
    let (_, agent) = project_and_agent(&wedged).await;
    store::create_input(&wedged, agent, &json!("fetch it"), None)
        .await
        .unwrap();

    // The holder commits a model step with an external call, claims again
    // and marks the call running: its IO may be happening now.
    let first = store::claim_agents(&wedged, "wedged-worker", 1, TTL)
        .await
        .unwrap()[0];
    let input_ids: Vec<Uuid> = wedged
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let step = ModelStep {
        input_ids,
        message: vec![
            json!({"type": "tool_use", "id": "toolu_1", "name": "web_fetch", "input": {"url": "https://example.com"}}),
        ],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "web_fetch".into(),
            input: json!({"url": "https://example.com"}),
            kind: ToolKind::External,
        }],
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    store::commit_model_step(&wedged, first, &step)
        .await
        .unwrap();
    let claim: Claim = store::claim_agents(&wedged, "wedged-worker", 1, TTL)
        .await
        .unwrap()[0];
    let call: Uuid = wedged
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::start_tool_call(&wedged, claim, call).await.unwrap();

    dba.batch_execute(&with_agent(&recipe("release-agent"), agent))
        .await
        .expect("the recipe runs");

    assert_eq!(lease_epoch(&dba, agent).await, claim.epoch + 1);
    let row = dba
        .query_one(
            "SELECT a.state, a.lease_owner, t.status, t.is_error, \
                    (SELECT count(*) FROM holdfast.events e \
                      WHERE e.agent_id = a.id AND e.type = 'tool_call.interrupted') \
               FROM holdfast.agents a JOIN holdfast.tool_calls t ON t.agent_id = a.id \
              WHERE a.id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, String>(0),
        "ready",
        "another worker may claim it"
    );
    assert_eq!(row.get::<_, Option<String>>(1), None);
    assert_eq!(
        row.get::<_, String>(2),
        "completed",
        "the call is never rerun"
    );
    assert!(row.get::<_, bool>(3));
    assert_eq!(row.get::<_, i64>(4), 1);

    // The old holder learns it lost the lease and can save nothing.
    let renewals = store::renew_leases(&wedged, "wedged-worker", &[claim], TTL)
        .await
        .unwrap();
    assert!(!renewals[0].renewed);
    let late = store::commit_tool_result(&wedged, claim, call, &json!("late"), false).await;
    assert!(matches!(late, Err(Error::LeaseLost(_))), "{late:?}");

    // On an agent nobody holds, the recipe changes nothing.
    let (_, idle) = project_and_agent(&dba).await;
    let before = lease_epoch(&dba, idle).await;
    dba.batch_execute(&with_agent(&recipe("release-agent"), idle))
        .await
        .unwrap();
    assert_eq!(lease_epoch(&dba, idle).await, before);
}

async fn events_of(client: &Client, agent: Uuid) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM holdfast.events WHERE agent_id = $1), \
                    (SELECT count(*) FROM holdfast.webhook_deliveries WHERE agent_id = $1)",
            &[&agent],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// An agent with a few events (config changes), archived by a session
/// whose clock is `offset` ahead.
async fn archived_agent(db: &TestDb, project: Uuid, offset: &str) -> Uuid {
    let client = db.connect().await;
    client
        .batch_execute(&format!("SET holdfast.clock_offset = '{offset}'"))
        .await
        .unwrap();
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::patch_agent_config(
        &client,
        agent,
        &json!({"system": "one"}),
        store::ConfigApply::Now,
    )
    .await
    .unwrap();
    store::archive_agent(&client, agent).await.unwrap();
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimming_events_by_the_recipe_removes_only_long_archived_timelines() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = store::ensure_project(&client, "retention").await.unwrap();
    store::create_webhook_endpoint(
        &client,
        project,
        "http://127.0.0.1:9/hook",
        &json!(["*"]),
        None,
        true,
    )
    .await
    .unwrap();
    let long_ago = archived_agent(&db, project, "0 days").await;
    let lately = archived_agent(&db, project, "60 days").await;
    let live = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::patch_agent_config(
        &client,
        live,
        &json!({"system": "live"}),
        store::ConfigApply::Now,
    )
    .await
    .unwrap();
    for agent in [long_ago, lately, live] {
        let (events, deliveries) = events_of(&client, agent).await;
        assert!(
            events > 0 && deliveries == events,
            "{events} events, {deliveries} deliveries"
        );
    }

    // 91 days on: `long_ago` was archived 91 days before, `lately` 31.
    let dba = db.connect().await;
    dba.batch_execute("SET holdfast.clock_offset = '91 days'")
        .await
        .unwrap();
    dba.batch_execute(&recipe("trim-events"))
        .await
        .expect("the recipe runs");

    assert_eq!(events_of(&client, long_ago).await, (0, 0));
    assert!(events_of(&client, lately).await.0 > 0);
    assert!(events_of(&client, live).await.0 > 0);
    // Nothing else of the trimmed agent is touched.
    let config_kept: bool = client
        .query_one(
            "SELECT config ->> 'system' = 'one' FROM holdfast.agents WHERE id = $1",
            &[&long_ago],
        )
        .await
        .unwrap()
        .get(0);
    assert!(config_kept);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_pass_by_the_recipe_prunes_finished_agents_past_retention_only() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = store::ensure_project(&client, "kept-30d").await.unwrap();
    store::set_project_retention(&client, "kept-30d", Some(Duration::from_secs(30 * 86_400)))
        .await
        .unwrap();
    let finished = archived_agent(&db, project, "0 days").await;
    let busy = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::create_input(&client, busy, &json!("a turn that is still open"), None)
        .await
        .unwrap();
    let busy_events = events_of(&client, busy).await;
    assert!(events_of(&client, finished).await.0 > 0 && busy_events.0 > 0);

    // 40 days on, past the project's 30 days.
    let dba = db.connect().await;
    dba.batch_execute("SET holdfast.clock_offset = '40 days'")
        .await
        .unwrap();
    dba.batch_execute(&recipe("retention-tick"))
        .await
        .expect("the recipe runs");

    assert_eq!(events_of(&client, finished).await, (0, 0));
    assert_eq!(
        events_of(&client, busy).await,
        busy_events,
        "an open turn keeps its timeline"
    );
}
