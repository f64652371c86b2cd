//! What a process is called in records and labels: its task name (`comm`, the 15 bytes
//! `ps -o comm` shows, which `prctl(PR_SET_NAME)` changes), except for interpreters, whose
//! task name says nothing about the program (every Python service is `python3`). For them
//! the program comes from the command line, as kernsnoopd names Magma's Python services:
//! the module of `python3 -m mod`, the script of `python3 app.py`, the jar or main class of
//! `java`, the script of `node`, `ruby`, `perl` and `php`.

/// Longest name kept, in bytes (cut at a character boundary): a label, not a command line.
pub const MAX_NAME: usize = 64;

/// Which interpreter a task name is, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interpreter {
    Python,
    Java,
    /// node, ruby, perl, php: the first argument that is not an option is the script.
    Script,
}

fn interpreter(comm: &str) -> Option<Interpreter> {
    // Versioned names: python3, python3.12, php8.2, nodejs.
    let stem = comm.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    match stem {
        "python" | "pypy" => Some(Interpreter::Python),
        "java" => Some(Interpreter::Java),
        "node" | "nodejs" | "ruby" | "perl" | "php" | "php-fpm" => Some(Interpreter::Script),
        _ => None,
    }
}

/// The program's name from its task name and command line (`/proc/PID/cmdline`: arguments
/// separated by NULs). A renamed task (`comm` no longer an interpreter's) keeps its name.
pub fn program_name(comm: &str, cmdline: &[u8]) -> String {
    let comm = comm.trim_end_matches('\n');
    let from_args = interpreter(comm).and_then(|i| {
        let args: Vec<&str> = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .skip(1)
            .filter_map(|a| std::str::from_utf8(a).ok())
            .collect();
        match i {
            Interpreter::Python => python_program(&args),
            Interpreter::Java => java_program(&args),
            Interpreter::Script => first_operand(&args, &[]).map(script_stem),
        }
    });
    cut(from_args.as_deref().filter(|n| !n.is_empty()).unwrap_or(comm))
}

fn cut(name: &str) -> String {
    let mut end = name.len().min(MAX_NAME);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// The first argument that is not an option, skipping the values of `with_value` options.
fn first_operand<'a>(args: &[&'a str], with_value: &[&str]) -> Option<&'a str> {
    let mut it = args.iter();
    while let Some(&a) = it.next() {
        if with_value.contains(&a) {
            it.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// A script's file name without its directory and extension; `index` and `main` (what
/// node projects call their entry point) take their directory's name instead.
fn script_stem(path: &str) -> String {
    let p = std::path::Path::new(path);
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or(path);
    if matches!(stem, "index" | "main" | "__main__")
        && let Some(dir) = p.parent().and_then(|d| d.file_name()).and_then(|d| d.to_str())
    {
        return dir.to_string();
    }
    stem.to_string()
}

fn python_program(args: &[&str]) -> Option<String> {
    let mut it = args.iter();
    while let Some(&a) = it.next() {
        match a {
            "-m" => return it.next().map(|m| m.to_string()),
            "-c" => return None, // code on the command line: no name to give
            "-W" | "-X" | "-Q" => {
                it.next();
            }
            _ if a.starts_with("-m") && a.len() > 2 => return Some(a[2..].to_string()),
            _ if a.starts_with('-') => {}
            script => return Some(script_stem(script)),
        }
    }
    None
}

fn java_program(args: &[&str]) -> Option<String> {
    let with_value = ["-cp", "-classpath", "--class-path", "-p", "--module-path"];
    let mut it = args.iter();
    while let Some(&a) = it.next() {
        match a {
            "-jar" => return it.next().map(|j| script_stem(j)),
            "-m" | "--module" => {
                return it.next().map(|m| m.split('/').next_back().unwrap_or(m).to_string());
            }
            _ if with_value.contains(&a) => {
                it.next();
            }
            _ if a.starts_with('-') => {}
            // A main class: its simple name (org.apache.kafka.Kafka → Kafka).
            class => return Some(class.rsplit('.').next().unwrap_or(class).to_string()),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::program_name;

    fn cmd(args: &[&str]) -> Vec<u8> {
        args.iter().flat_map(|a| a.bytes().chain([0])).collect()
    }

    #[test]
    fn plain_programs_keep_their_task_name() {
        assert_eq!(program_name("nginx", &cmd(&["nginx: worker process"])), "nginx");
        // A renamed interpreter is not an interpreter any more.
        assert_eq!(program_name("fetcher", &cmd(&["python3", "-m", "x"])), "fetcher");
    }

    #[test]
    fn python_is_named_by_module_or_script() {
        assert_eq!(
            program_name("python3", &cmd(&["python3", "-u", "-m", "http.server"])),
            "http.server"
        );
        assert_eq!(
            program_name(
                "python3.12",
                &cmd(&["/usr/bin/python3.12", "/srv/api/app.py", "--port", "80"])
            ),
            "app"
        );
        assert_eq!(
            program_name("python3", &cmd(&["python3", "-W", "ignore", "worker.py"])),
            "worker"
        );
        assert_eq!(program_name("python3", &cmd(&["python3", "-mcelery"])), "celery");
        assert_eq!(program_name("python3", &cmd(&["python3", "/srv/pkg/__main__.py"])), "pkg");
        // No program to name: the task name stays.
        assert_eq!(program_name("python3", &cmd(&["python3", "-c", "print(1)"])), "python3");
        assert_eq!(program_name("python3", &cmd(&["python3"])), "python3");
    }

    #[test]
    fn java_and_scripts() {
        assert_eq!(
            program_name("java", &cmd(&["java", "-Xmx1g", "-jar", "/opt/app/orders-1.2.jar"])),
            "orders-1.2"
        );
        assert_eq!(
            program_name(
                "java",
                &cmd(&["java", "-cp", "a.jar:b.jar", "org.apache.kafka.Kafka", "cfg"])
            ),
            "Kafka"
        );
        assert_eq!(program_name("java", &cmd(&["java", "-m", "app.mod/app.Main"])), "app.Main");
        assert_eq!(program_name("node", &cmd(&["node", "--inspect", "/srv/web/index.js"])), "web");
        assert_eq!(program_name("ruby", &cmd(&["ruby", "bin/rails"])), "rails");
        assert_eq!(program_name("php8.2", &cmd(&["php8.2", "artisan", "queue:work"])), "artisan");
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        let long = format!("{}é", "a".repeat(63));
        let n = program_name("python3", &cmd(&["python3", "-m", &long]));
        assert_eq!(n, "a".repeat(63));
    }
}
