//! A busy agent stays on its worker: a step whose end leaves the agent
//! ready keeps the lease, and the worker takes the next step at once,
//! without a release and a re-claim, each step at its own epoch.

use std::time::Duration;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{agent_with_input, count_events, spawn_worker, wait_for_event};
use holdfast_tests::TestDb;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_agents_next_step_is_taken_without_a_release_and_a_re_claim() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    // Every write of an agent row, in order: its state, holder and epoch.
    client
        .batch_execute(
            "CREATE TABLE public.agent_writes (
                 n bigserial PRIMARY KEY, agent_id uuid, state text, lease_owner text, lease_epoch bigint);
             CREATE FUNCTION public.record_agent_write() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO public.agent_writes (agent_id, state, lease_owner, lease_epoch)
                 VALUES (NEW.id, NEW.state, NEW.lease_owner, NEW.lease_epoch);
                 RETURN NULL;
             END $$;
             CREATE TRIGGER zz_record_agent_write AFTER UPDATE ON holdfast.agents
                 FOR EACH ROW EXECUTE FUNCTION public.record_agent_write();",
        )
        .await
        .unwrap();
    let fake = FakeProvider::start().await;
    // Two responses whose calls the worker runs itself (a tool the agent
    // does not have: answered at once with an error result), then the
    // answer that ends the turn.
    for _ in 0..2 {
        fake.push(Reply::tool_calls(vec![("no_such_tool", json!({}))]));
    }
    fake.push(Reply::text("Done."));
    let _worker = spawn_worker("w-busy", &db.config, &fake, &[]);
    let agent = agent_with_input(&client, "go").await;
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;
    assert_eq!(count_events(&client, agent, "model.response").await, 3);
    assert_eq!(count_events(&client, agent, "tool_call.completed").await, 2);

    let writes: Vec<(String, Option<String>, i64)> = client
        .query(
            "SELECT state, lease_owner, lease_epoch FROM public.agent_writes
              WHERE agent_id = $1 ORDER BY n",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let claimed = writes
        .iter()
        .position(|(state, ..)| state == "running")
        .expect("the agent was claimed");
    let (last, held) = writes[claimed..].split_last().unwrap();
    assert_eq!(
        (last.0.as_str(), last.1.as_deref()),
        ("idle", None),
        "the turn's end releases the agent: {writes:?}"
    );
    // From its claim to the turn's end the agent never turned ready (so
    // no claim could take it) and stayed with one holder, one epoch per
    // step: three model steps and two tool batches.
    assert!(
        held.iter()
            .all(|(state, owner, _)| state == "running" && owner.as_deref() == Some("w-busy")),
        "released or re-claimed between steps: {writes:?}"
    );
    let mut epochs: Vec<i64> = held.iter().map(|(.., epoch)| *epoch).collect();
    epochs.dedup();
    let first = epochs[0];
    assert_eq!(
        epochs,
        (first..first + 5).collect::<Vec<_>>(),
        "each step at the next epoch: {writes:?}"
    );
}
