//! The pages' style sheet, shared by the web view and the offline report (the charts'
//! own is `flow::STYLE`).

/// The pages' style (`/static/style.css` serves it with the charts').
pub const STYLE_CSS: &str = concat!(
    "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}",
    "nav{background:#263238;color:#eee;padding:6px 12px}nav a{color:#cfe8ff;margin-left:12px}",
    "#live-status{float:right;color:#b0bec5;font-size:12px}",
    "main,#health{padding:4px 16px}h1{font-size:20px}h1 small,h2 small{color:#666;font-weight:normal;font-size:14px}",
    "h2{font-size:17px;margin-top:22px}table{border-collapse:collapse;background:#fff}",
    "td,th{padding:3px 8px;border-bottom:1px solid #e5e5e5;text-align:left;vertical-align:middle}",
    "th{background:#eef1f3;font-weight:600}table.num td+td,table.num th+th{text-align:right}",
    "td.spark{padding:1px 4px}td.n{text-align:right}",
    ".bar{display:flex;width:180px;height:12px;background:#eee}.bar span{display:block;height:12px}",
    ".key{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}",
    ".v-receiver-window{background:#e377c2}.v-send-buffer{background:#17becf}",
    ".v-network{background:#d62728}.v-application{background:#7f7f7f}.v-unknown{background:#ccc}",
    ".charts svg{display:block;margin:8px 0;max-width:100%;height:auto;border:1px solid #e5e5e5}",
    "table.facts th{background:none;font-weight:normal;color:#555}.verdict{font-size:15px}",
    "pre{background:#fff;border:1px solid #e5e5e5;padding:8px;overflow:auto;max-height:400px}",
    ".orders a,.orders b{margin-left:6px}",
    "table.num td.l,table.num th.l{text-align:left}td.verdict{min-width:15em}",
    "td.verdict small,td.l small{color:#555}td.rate{font-weight:600;white-space:nowrap}",
    "form.filters{margin:8px 0}form.filters label{margin-right:12px}",
    "p.idle{color:#555}tr.group td{color:#333}",
    "p.warn{background:#fff3e0;border-left:4px solid #e65100;padding:6px 10px;max-width:60em}",
);
