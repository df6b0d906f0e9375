// Types for the parser package (it ships none): the parts our tests read.
declare module 'parse-prometheus-text-format' {
  export interface ParsedFamily {
    name: string;
    help: string;
    type: 'COUNTER' | 'GAUGE' | 'UNTYPED' | 'SUMMARY' | 'HISTOGRAM';
    metrics: Array<{ value: string; labels?: Record<string, string>; timestamp_ms?: string }>;
  }
  export default function parse(text: string): ParsedFamily[];
}
