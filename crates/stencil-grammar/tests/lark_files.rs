//! The Lark test set (`schemas/grammars/*.lark`): every file compiles, and each accepts and
//! rejects the texts given for it here (the same texts Lark itself accepts and rejects; the
//! Python package's tests check real generations against Lark).

use std::path::Path;

use stencil_grammar::{compile, ir::matches, ConstraintSpec, Options};

fn cases(name: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match name {
        "answer.lark" => (
            &["Answer: {\"city\": \"Oslo\", \"population\": 700000}\nConfidence: high"],
            &[
                "Answer: {\"city\": \"Oslo\", \"population\": -7}\nConfidence: low",
                "Answer: {\"city\": \"Oslo\"}\nConfidence: low",
                "Answer: {\"city\": \"Oslo\", \"population\": 7}\nConfidence: huge",
            ],
        ),
        "calc.lark" => (
            &["1 + 2*(3-4)", "-5", "10/2 - -3"],
            &["1+", "(1", "12345", "1 2"],
        ),
        "csv.lark" => (
            &["name,age,city\nBob,33,Paris\n", "name,age,city\nAl,1,Xi\nBo,2,Yu\nCy,3,Zo\n"],
            &[
                "name,age,city\n",
                "name,age,city\nbob,33,Paris\n",
                "name,age,city\nAl,1,Xi\nBo,2,Yu\nCy,3,Zo\nDi,4,Wo\n",
            ],
        ),
        "greeting.lark" => (
            &["Hello, Bob! Nice to meet you.", "HI, x!", "good MORNING, ann!"],
            &["Hey, Bob!", "Hello, Bob! No full stop", "Hello, Bob!!"],
        ),
        "shopping.lark" => (
            &["- {\"fruit\": \"apple\", \"count\": 2}\n- {\"fruit\":\"pear\",\"count\":12}\n"],
            &[
                "- {\"fruit\": \"kiwi\", \"count\": 2}\n",
                "- {\"fruit\": \"pear\", \"count\": 13}\n",
                "",
            ],
        ),
        "sql.lark" => (
            &[
                "select a, b from t where x >= 3;",
                "SELECT * FROM users;",
                "Select name FROM people WHERE city = \"Oslo\";",
            ],
            &["SELECT FROM t;", "SELECT a FROM t WHERE x => 3;", "SELECT a FROM t"],
        ),
        "tool_call.lark" => (
            &["<tool_call>{\"name\": \"get_time\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>"],
            &[
                "<tool_call>{\"name\": \"get_date\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
                "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
            ],
        ),
        other => panic!("{other}: add its accepted and rejected texts to this test"),
    }
}

#[test]
fn every_lark_file_compiles_and_decides_its_cases() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/grammars");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "lark"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let g = compile(&ConstraintSpec::Lark(text), &Options::generation())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .grammar;
        let accepts = |s: &str| matches(&g.rule(g.start).expr, &g.rules, s.as_bytes());
        let (good, bad) = cases(name);
        for s in good {
            assert!(accepts(s), "{name} rejects {s:?}");
        }
        for s in bad {
            assert!(!accepts(s), "{name} accepts {s:?}");
        }
    }
}
