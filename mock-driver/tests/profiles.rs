//! Profiles (measured, documented, hip), the tier of every semantic choice,
//! and the portability verdict for scenarios and roles.

use ipc_harness::roles::{RoleSet, RunOptions};
use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::{Dialect, MemKind};
use ipc_mock_driver::portability::{check_roles, check_scenario};
use ipc_mock_driver::profiles::{choice_tier, CHOICE_TIERS};
use ipc_mock_driver::{Profile, Semantics, SimBackend, SimConfig, Tier};
use std::path::Path;

#[test]
fn every_choice_has_exactly_one_tier_in_listing_order() {
    let names: Vec<&str> = Semantics::default()
        .describe()
        .iter()
        .map(|c| c.name)
        .collect();
    let tiered: Vec<&str> = CHOICE_TIERS.iter().map(|c| c.name).collect();
    assert_eq!(names, tiered);
    for c in CHOICE_TIERS {
        assert!(!c.rests_on.is_empty(), "{}: says what it rests on", c.name);
    }
    assert_eq!(
        choice_tier("va_reuse").map(|c| c.tier),
        Some(Tier::Incidental)
    );
    assert_eq!(choice_tier("reopen").map(|c| c.tier), Some(Tier::Contract));
    assert!(choice_tier("no_such_choice").is_none());
}

#[test]
fn documented_keeps_exactly_the_contract_choices() {
    let measured = Semantics::default().describe();
    let documented = Semantics::documented().describe();
    for (m, d) in measured.iter().zip(&documented) {
        let tier = choice_tier(m.name).expect("tiered").tier;
        assert_eq!(
            m.value == d.value,
            tier == Tier::Contract,
            "{}: measured {}, documented {}, tier {tier}",
            m.name,
            m.value,
            d.value
        );
    }
    // The examples the issue names.
    let doc = Semantics::documented();
    assert_eq!(doc.get("va_reuse").as_deref(), Some("never"));
    assert_eq!(doc.get("suballocation").as_deref(), Some("off"));
    assert_eq!(doc.get("reopen").as_deref(), Some("refcount"));
}

#[test]
fn each_profile_sets_its_choices() {
    assert_eq!(Profile::Measured.config(), SimConfig::default());
    assert!(Profile::Measured.settings().is_empty());
    for d in Dialect::ALL {
        assert_eq!(Profile::Documented.semantics(d), Semantics::documented());
        assert_eq!(Profile::Hip.semantics(d), Semantics::hip_profile());
    }
    assert_eq!(
        Profile::Measured.semantics(Dialect::Hip),
        Semantics::hip_profile()
    );
    let hip: Vec<&str> = Profile::Hip.settings().iter().map(|(n, _)| *n).collect();
    let expected: Vec<&str> = Semantics::hip_differences()
        .iter()
        .map(|(n, _, _)| *n)
        .collect();
    assert_eq!(hip, expected);
    assert_eq!(
        SimBackend::with_profile(Profile::Documented)
            .config()
            .semantics,
        Semantics::documented()
    );
}

#[test]
fn profile_and_tier_names_parse_and_unknown_ones_list_the_valid_names() {
    for p in Profile::ALL {
        assert_eq!(p.as_str().parse::<Profile>(), Ok(p));
    }
    for t in Tier::ALL {
        assert_eq!(t.to_string().parse::<Tier>(), Ok(t));
    }
    let err = "measure".parse::<Profile>().unwrap_err();
    assert_eq!(
        err,
        "unknown profile 'measure' (valid: measured, documented, hip)"
    );
    let err = "relied_on".parse::<Tier>().unwrap_err();
    assert_eq!(
        err,
        "unknown tier 'relied_on' (valid: contract, relied-on, incidental)"
    );
}

fn parse(text: &str) -> scenario::Scenario {
    scenario::parse(text, Path::new("test.ipc")).expect("parses")
}

const VA_REUSE: &str = "\
devices 1
process owner device=0
owner: a = malloc 2MiB
owner: c = malloc 2MiB
owner: free a
owner: b = malloc 2MiB
";

const PORTABLE: &str = "\
devices 1
process owner device=0
process peer device=0
owner: a = malloc 2MiB
owner: fill a 0xab
owner: h = ipc_get a
owner: send h -> peer
owner: sync
peer: p = ipc_open h
peer: read p 0 16 => bytes ab*16
peer: ipc_close p
";

#[test]
fn a_scenario_that_depends_on_va_reuse_names_the_choice() {
    let r = check_scenario(
        &parse(VA_REUSE),
        &ExecOptions::default(),
        &SimConfig::default(),
    );
    assert!(!r.is_portable());
    assert_eq!(r.divergences.len(), 1, "{r:?}");
    let d = &r.divergences[0];
    assert_eq!(
        (d.profile, d.line, d.op.as_str()),
        (Profile::Documented, 6, "b = malloc 2MiB")
    );
    assert!(!d.causes.together);
    let names: Vec<&str> = d.causes.choices.iter().map(|c| c.choice).collect();
    assert_eq!(names, ["va_reuse"]);
    assert_eq!(d.causes.choices[0].tier, Tier::Incidental);
    assert_eq!(d.causes.choices[0].measured, "top-down");
    assert_eq!(d.causes.choices[0].value, "never");
    assert_eq!(
        r.tiers().into_iter().collect::<Vec<_>>(),
        [Tier::Incidental]
    );
}

#[test]
fn a_scenario_on_documented_behaviour_is_portable() {
    for dialect in Dialect::ALL {
        let opts = ExecOptions {
            dialect,
            ..ExecOptions::default()
        };
        let r = check_scenario(&parse(PORTABLE), &opts, &SimConfig::default());
        assert!(r.is_portable(), "{dialect}: {r:?}");
        assert_eq!(r.verdicts.len(), Profile::ALL.len());
        assert!(r.verdicts.iter().all(|(_, s, _)| s.is_success()));
    }
}

#[test]
fn roles_that_reuse_a_freed_address_are_not_portable() {
    let roles = RoleSet::new().devices(1).role("owner", 0, |ctx| {
        let d = ctx.driver();
        let a = d.alloc(MemKind::Device, 2 << 20)?;
        let _keep = d.alloc(MemKind::Device, 2 << 20)?;
        d.free(ipc_harness::FreeKind::Device, a)?;
        let b = d.alloc(MemKind::Device, 2 << 20)?;
        Ok(serde_json::Value::Bool(a == b))
    });
    let r = check_roles(&roles, &RunOptions::seeded(3)).expect("starts");
    assert!(!r.is_portable());
    let outcome = r
        .divergences
        .iter()
        .find(|d| d.aspect == "outcome")
        .expect("the returned value differs");
    assert_eq!(outcome.profile, Profile::Documented);
    assert_eq!(outcome.role, "owner");
    assert_eq!(
        (outcome.measured.as_str(), outcome.other.as_str()),
        ("Ok(true)", "Ok(false)")
    );
    let names: Vec<&str> = outcome.causes.choices.iter().map(|c| c.choice).collect();
    assert_eq!(names, ["va_reuse"]);
    assert!(r.to_string().contains("va_reuse=never"), "{r}");
}

#[test]
fn roles_that_share_a_whole_allocation_are_portable() {
    let roles = RoleSet::new()
        .devices(1)
        .role("owner", 0, |ctx| {
            let a = ctx.driver().alloc(MemKind::Device, 2 << 20)?;
            ctx.driver().memset(a, 0x5a, 64)?;
            let h = ctx
                .driver()
                .ipc_get_mem_handle(a, ipc_harness::OutArg::Valid)?;
            ctx.send("peer", ipc_harness::roles::Message::handle(h))?;
            ctx.recv_from("peer")?;
            ctx.driver().free(ipc_harness::FreeKind::Device, a)?;
            Ok(serde_json::Value::Null)
        })
        .role("peer", 0, |ctx| {
            let h = ctx
                .recv_from("owner")?
                .as_handle()
                .ok_or_else(|| ipc_harness::roles::fail("not a handle"))?;
            let p = ctx
                .driver()
                .ipc_open_mem_handle(h, 1, ipc_harness::OutArg::Valid)?;
            let bytes = ctx.driver().read(p, 64)?;
            ctx.driver().ipc_close_mem_handle(p)?;
            ctx.send(
                "owner",
                ipc_harness::roles::Message::bytes(b"done".to_vec()),
            )?;
            Ok(serde_json::Value::Bool(bytes == vec![0x5a; 64]))
        });
    let r = check_roles(&roles, &RunOptions::seeded(5)).expect("starts");
    assert!(r.is_portable(), "{r}");
    assert!(r.all_ok.iter().all(|(_, ok)| *ok), "{r:?}");
}
