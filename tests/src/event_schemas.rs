//! Events against the OpenAPI document's event union (`EventView`): each
//! event must validate against its type's variant and carry no `data` field
//! the variant's data schema does not declare. For tests that drive real
//! turns to check what they wrote.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use tokio_postgres::Client;

/// The OpenAPI document the API serves, as JSON.
pub fn document() -> Value {
    serde_json::to_value(holdfast_api::openapi()).expect("the OpenAPI document is JSON")
}

/// The document's schema that `reference` (`#/components/schemas/NAME`) names.
pub fn schema_at<'a>(document: &'a Value, reference: &str) -> &'a Value {
    let name = reference
        .strip_prefix("#/components/schemas/")
        .unwrap_or_else(|| panic!("a reference into the components: {reference}"));
    &document["components"]["schemas"][name]
}

/// `schema`, or the schema it names if it is a `$ref`.
pub fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(reference) => schema_at(document, reference),
        None => schema,
    }
}

/// A validator of one event against the document's `EventView`.
pub fn event_validator(document: &Value) -> jsonschema::Validator {
    let mut schema = json!({"$ref": "#/components/schemas/EventView"});
    schema["components"] = document["components"].clone();
    jsonschema::validator_for(&schema).expect("the document's schemas compile")
}

/// Each event (as the API lists it) validates against the document's
/// `EventView`, so against its type's variant, and its `data` has no field
/// the variant's data schema does not declare. Returns the types seen.
pub fn assert_events_match(document: &Value, events: &[Value]) -> BTreeSet<String> {
    let validator = event_validator(document);
    let mapping = &document["components"]["schemas"]["EventView"]["discriminator"]["mapping"];
    let mut seen = BTreeSet::new();
    for event in events {
        let errors: Vec<String> = validator
            .iter_errors(event)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{event} does not match its schema: {errors:#?}"
        );
        let event_type = event["type"].as_str().unwrap();
        let variant = schema_at(document, mapping[event_type].as_str().unwrap());
        let data = resolve(document, &variant["properties"]["data"]);
        for field in event["data"].as_object().unwrap().keys() {
            assert!(
                data["properties"].get(field).is_some(),
                "{event_type}'s data has `{field}`, which its schema does not declare"
            );
        }
        seen.insert(event_type.to_owned());
    }
    seen
}

/// [`assert_events_match`] over every event in the database `client` is
/// connected to, as the API would list them. Returns the types seen.
pub async fn assert_saved_events_match(client: &Client) -> BTreeSet<String> {
    let events: Vec<Value> = client
        .query(
            "SELECT jsonb_build_object('seq', seq, 'id', id, 'agent_id', agent_id, 'type', type,
                                       'data', data, 'created_at', created_at)
               FROM holdfast.events ORDER BY agent_id, seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_events_match(&document(), &events)
}
