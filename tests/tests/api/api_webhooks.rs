//! The webhook routes over a real socket: create (secret once), list,
//! deliveries, delete, project isolation, bad input.

use holdfast_db::store;
use holdfast_providers::egress::EgressPolicy;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::{default_config, TestDb};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;

#[tokio::test]
async fn endpoints_are_created_listed_delivered_to_and_deleted_per_project() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start_with(&db, |c| {
        c.egress = Arc::new(EgressPolicy::parse("webhook=127.0.0.0/8").unwrap())
    })
    .await;
    let (project, key) = project_key(&client).await;
    let (_, other_key) = project_key(&client).await;

    let created = server
        .request(Method::POST, "/v1/webhooks", &key)
        .json(&json!({"url": "http://127.0.0.1:9/hook", "events": ["input.received"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let created: Value = created.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));

    let listed: Value = server
        .request(Method::GET, "/v1/webhooks", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["webhooks"][0]["id"], json!(id));
    assert!(
        listed["webhooks"][0].get("secret").is_none(),
        "the secret is shown once"
    );
    let foreign: Value = server
        .request(Method::GET, "/v1/webhooks", &other_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(foreign["webhooks"], json!([]));

    // An event in the project makes a delivery, visible through the route.
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::create_input(&client, agent, &json!("hi"), None)
        .await
        .unwrap();
    let deliveries: Value = server
        .request(Method::GET, &format!("/v1/webhooks/{id}/deliveries"), &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(deliveries["deliveries"].as_array().unwrap().len(), 1);
    assert_eq!(
        deliveries["deliveries"][0]["event_type"],
        json!("input.received")
    );

    // Another project cannot see or delete it.
    for (method, path) in [
        (Method::GET, format!("/v1/webhooks/{id}/deliveries")),
        (Method::DELETE, format!("/v1/webhooks/{id}")),
    ] {
        let response = server
            .request(method, &path, &other_key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let deleted = server
        .request(Method::DELETE, &format!("/v1/webhooks/{id}"), &key)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn bad_urls_and_unknown_event_types_are_400_naming_the_field_and_write_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (_, key) = project_key(&client).await;
    let cases = [
        (
            json!({"url": "ftp://example.com/hook", "events": ["*"]}),
            "url",
        ),
        (json!({"url": "not a url", "events": ["*"]}), "url"),
        (
            json!({"url": "http://127.0.0.1/hook", "events": ["*"]}),
            "url",
        ),
        (
            json!({"url": "https://example.com/hook", "events": ["no.such_event"]}),
            "events",
        ),
        (
            json!({"url": "https://example.com/hook", "events": []}),
            "events",
        ),
    ];
    for (body, field) in cases {
        let response = server
            .request(Method::POST, "/v1/webhooks", &key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["field"], json!(field), "{body}: {error}");
    }
    let count: i64 = client
        .query_one("SELECT count(*) FROM holdfast.webhook_endpoints", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 0);
}
