//! When the one-file form is the slow form: a command that runs a tool taking a list of
//! files once per task (`prettier --write "$SWARM_FILE"`) starts that tool once per file,
//! where the list form (`$SWARM_FILES`) lets one process take many tasks (`--per-process`),
//! each still committed and merged alone. swarm says so at plan time; it never changes the
//! command.

use super::file_vars::file_vars;

/// File editors and formatters: programs that edit the files named on their command line,
/// a list of them, and do nothing else (so they write no git directory either: `no_git`).
pub(super) const FILE_EDITORS: &[&str] = &[
    "prettier",
    "ruff",
    "black",
    "isort",
    "eslint",
    "rustfmt",
    "gofmt",
    "goimports",
    "clang-format",
    "pyupgrade",
    "autopep8",
    "yapf",
    "sed",
    "dos2unix",
    "unix2dos",
    "stylua",
    "shfmt",
    "biome",
    "dprint",
    "comby",
];

/// Does program `name` (as a word of the command, after `python -m`, `npx`…) take a list of
/// files? The file editors, and `perl`.
fn takes_a_list(name: &str) -> bool {
    FILE_EDITORS.contains(&name) || name == "perl"
}

/// Below this many tasks a process per task costs little: no hint.
const MANY: usize = 20;

/// The hint for `command` run over `tasks` tasks, if it names only `$SWARM_FILE` and runs a
/// program that takes a list: the program, and the command in the list form.
pub(crate) fn hint(command: &str, tasks: usize) -> Option<String> {
    let vars = file_vars(command);
    if tasks < MANY || !vars.file.named || vars.files.named {
        return None;
    }
    let words = shell_words::split(command).ok()?;
    let program = words.iter().find_map(|w| {
        let name = w.rsplit('/').next().unwrap_or(w);
        takes_a_list(name).then_some(name)
    })?;
    let list = command
        .replace("\"$SWARM_FILE\"", "$SWARM_FILES")
        .replace("\"${SWARM_FILE}\"", "$SWARM_FILES")
        .replace("${SWARM_FILE}", "$SWARM_FILES")
        .replace("$SWARM_FILE\"", "$SWARM_FILES\"");
    let list = if list.contains("SWARM_FILES") {
        list
    } else {
        command.replace("$SWARM_FILE", "$SWARM_FILES")
    };
    Some(format!(
        "{program} takes a list of files: with $SWARM_FILE each of the {tasks} tasks starts its \
         own {program}; the list form lets one process take many tasks, each still committed \
         and merged alone: --exec {}",
        shell_words::quote(&list)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_file_form_of_a_list_tool_gets_the_list_form() {
        let prettier = hint(r#"npx prettier --write "$SWARM_FILE""#, 100).unwrap();
        assert!(prettier.starts_with("prettier takes a list"), "{prettier}");
        assert!(
            prettier.ends_with("--exec 'npx prettier --write $SWARM_FILES'"),
            "{prettier}"
        );
        // Quoted for the shell it is pasted into.
        let sed = hint(r#"sed -i 's/a/b/' "$SWARM_FILE""#, 20).unwrap();
        assert!(
            sed.ends_with(r#"--exec 'sed -i '\''s/a/b/'\'' $SWARM_FILES'"#),
            "{sed}"
        );
        let ruff = hint(r#"ruff check --fix "${SWARM_FILE}""#, 30).unwrap();
        assert!(
            ruff.ends_with("--exec 'ruff check --fix $SWARM_FILES'"),
            "{ruff}"
        );
        // The list form already, a few tasks, a program not known to take a list: nothing.
        assert_eq!(hint("prettier --write $SWARM_FILES", 100), None);
        assert_eq!(hint(r#"prettier --write "$SWARM_FILE""#, 5), None);
        assert_eq!(hint(r#"./fix.sh "$SWARM_FILE""#, 100), None);
    }
}
