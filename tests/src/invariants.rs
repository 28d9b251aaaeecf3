//! "Nothing lost, nothing run twice", checked the same way after every
//! fault: the chaos soak and each managed-Postgres fault test end with it.
//! Read from the audit views (sql/schema/operations.sql) a DBA would query.

use tokio_postgres::Client;
use uuid::Uuid;

/// The violations among `agents` once their work has come to rest: an
/// event sequence with a gap, a model step without exactly one
/// `model.response`, an input taken into the history twice, a tool call
/// whose result was saved or interrupted more than once, an agent still
/// running (a lease left held) or stuck.
pub async fn violations_at_rest(client: &Client, agents: &[Uuid]) -> Vec<String> {
    let mut violations = Vec::new();
    for agent in agents {
        let audit = client
            .query_one(
                "SELECT gap_free, model_steps, model_responses FROM holdfast.agent_audit
                  WHERE agent_id = $1",
                &[agent],
            )
            .await
            .unwrap();
        if !audit.get::<_, bool>("gap_free") {
            violations.push(format!("agent {agent}: event seq has gaps"));
        }
        let steps: i64 = audit.get("model_steps");
        let responses: i64 = audit.get("model_responses");
        if steps != responses {
            violations.push(format!(
                "agent {agent}: {steps} model steps but {responses} model.response events"
            ));
        }
        let inputs_twice: i64 = client
            .query_one(
                "SELECT count(*) FROM (SELECT input_id FROM holdfast.messages
                  WHERE agent_id = $1 AND input_id IS NOT NULL
                  GROUP BY input_id HAVING count(*) > 1) twice",
                &[agent],
            )
            .await
            .unwrap()
            .get(0);
        if inputs_twice != 0 {
            violations.push(format!(
                "agent {agent}: {inputs_twice} inputs in the history twice"
            ));
        }
        let calls_ended_twice: i64 = client
            .query_one(
                "SELECT count(*) FROM holdfast.tool_call_audit
                  WHERE agent_id = $1 AND results_saved + interrupted > 1",
                &[agent],
            )
            .await
            .unwrap()
            .get(0);
        if calls_ended_twice != 0 {
            violations.push(format!(
                "agent {agent}: {calls_ended_twice} tool calls ended more than once"
            ));
        }
        let state: String = client
            .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[agent])
            .await
            .unwrap()
            .get(0);
        if state == "running" {
            violations.push(format!("agent {agent}: still running, its lease held"));
        }
    }
    let stuck: Vec<Uuid> = client
        .query(
            "SELECT agent_id FROM holdfast.stuck_agents WHERE agent_id = ANY($1)",
            &[&agents],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    for agent in stuck {
        violations.push(format!("agent {agent}: stuck"));
    }
    violations
}

/// Panics with every violation [`violations_at_rest`] finds.
pub async fn assert_at_rest(client: &Client, agents: &[Uuid]) {
    let violations = violations_at_rest(client, agents).await;
    assert!(
        violations.is_empty(),
        "{} invariant violations:\n  {}",
        violations.len(),
        violations.join("\n  ")
    );
}
