//! The audit views (sql/schema/operations.sql) that the demo's verdict and the
//! chaos soak read: what they count for a turn that ran a custom tool call,
//! and that they show what "nothing lost, nothing run twice" forbids — a
//! second result for one call, a gap in the timeline.

use holdfast_db::store;
use holdfast_tests::api_server::waiting_custom_call;
use holdfast_tests::scenario::event_types;
use holdfast_tests::{project_and_agent, TestDb};
use serde_json::json;
use tokio_postgres::{Client, Row};
use uuid::Uuid;

async fn agent_audit(client: &Client, agent: Uuid) -> Row {
    client
        .query_one(
            "SELECT * FROM holdfast.agent_audit WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
}

async fn tool_call_audit(client: &Client, call: Uuid) -> Row {
    client
        .query_one(
            "SELECT * FROM holdfast.tool_call_audit WHERE tool_call_id = $1",
            &[&call],
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn the_audit_views_count_one_result_per_call_and_show_a_second_result_and_a_gap() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    let call = waiting_custom_call(&client, agent).await;
    store::submit_tool_result(&client, call, &json!("found it"), false)
        .await
        .unwrap();

    let audit = agent_audit(&client, agent).await;
    let events = event_types(&client, agent).await;
    assert_eq!(audit.get::<_, i64>("events"), events.len() as i64);
    assert_eq!(audit.get::<_, i64>("last_seq"), events.len() as i64);
    assert!(audit.get::<_, bool>("gap_free"));
    assert_eq!(audit.get::<_, i64>("model_steps"), 1);
    assert_eq!(audit.get::<_, i64>("model_responses"), 1);
    assert_eq!(audit.get::<_, i64>("inputs"), 1);
    assert_eq!(audit.get::<_, i64>("inputs_in_history"), 1);
    assert_eq!(audit.get::<_, i64>("tool_calls"), 1);
    assert_eq!(audit.get::<_, i64>("tool_calls_completed"), 1);
    assert_eq!(audit.get::<_, i64>("tool_calls_interrupted"), 0);
    assert_eq!(audit.get::<_, i64>("commands"), 0);
    let tool = tool_call_audit(&client, call).await;
    assert_eq!(tool.get::<_, Uuid>("agent_id"), agent);
    assert_eq!(tool.get::<_, String>("kind"), "custom");
    assert_eq!(tool.get::<_, i64>("results_saved"), 1);
    assert_eq!(tool.get::<_, i64>("interrupted"), 0);
    assert_eq!(tool.get::<_, i64>("commands_accepted"), 0);
    assert_eq!(tool.get::<_, Option<String>>("command_state"), None);

    // A second result for the same call, as a double run would save it.
    client
        .execute(
            "SELECT holdfast.append_event($1, 'tool_call.completed',
                    jsonb_build_object('tool_call_id', $2::uuid, 'output', 'again'))",
            &[&agent, &call],
        )
        .await
        .unwrap();
    assert_eq!(
        tool_call_audit(&client, call)
            .await
            .get::<_, i64>("results_saved"),
        2
    );
    assert_eq!(
        agent_audit(&client, agent)
            .await
            .get::<_, i64>("tool_calls_completed"),
        2
    );

    // An event past a missing seq.
    client
        .execute(
            "INSERT INTO holdfast.events (agent_id, seq, type, data)
             SELECT id, last_event_seq + 2, 'turn.started', '{}' FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    assert!(!agent_audit(&client, agent).await.get::<_, bool>("gap_free"));
}
