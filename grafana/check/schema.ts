// The types each generated file checks a dashboard against: Grafana's own, from
// @grafana/schema, with two adjustments that JSON needs and no check is lost by.
import type { DataQuery, Dashboard as GrafanaDashboard, Panel } from '@grafana/schema';
import type * as barchart from '@grafana/schema/dist/esm/raw/composable/barchart/panelcfg/x/BarChartPanelCfg_types.gen';
import type * as bargauge from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen';
import type * as heatmap from '@grafana/schema/dist/esm/raw/composable/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen';
import type * as piechart from '@grafana/schema/dist/esm/raw/composable/piechart/panelcfg/x/PieChartPanelCfg_types.gen';
import type * as stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
import type * as table from '@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen';
import type * as xychart from '@grafana/schema/dist/esm/raw/composable/xychart/panelcfg/x/XYChartPanelCfg_types.gen';
import type * as timeseries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';

// 1. JSON cannot name a TypeScript enum member, only its value: every string enum becomes
//    the union of its values ("palette-classic", not FieldColorModeId.PaletteClassic).
//    Structure, required fields, excess properties and numeric enums are checked as declared.
export type Json<T> = unknown extends T
  ? T
  : T extends string
    ? `${T}`
    : T extends number | boolean | null | undefined
      ? T
      : T extends ReadonlyArray<infer E>
        ? Array<Json<E>>
        : { [K in keyof T]: Json<T[K]> };

// 2. A Prometheus target. The plugin's query schema is not in @grafana/schema; these are
//    the fields of Grafana's Prometheus data source query (dataquery.cue) the dashboards use.
export interface PrometheusQuery extends DataQuery {
  expr: string;
  legendFormat?: string;
  instant?: boolean;
  range?: boolean;
  format?: 'time_series' | 'table' | 'heatmap';
  editorMode?: 'code' | 'builder';
  interval?: string;
  exemplar?: boolean;
}

// The generic Panel leaves options as Record<string, unknown>: each panel is checked again
// with its plugin's own Options and FieldConfig types.
type PanelOf<Type extends string, Options, Custom> = Omit<
  Panel<Record<string, unknown>, Custom>,
  'type' | 'options' | 'targets'
> & { type: Type; options: Options; targets: PrometheusQuery[] };

export type Dashboard = Json<GrafanaDashboard>;

export interface Panels {
  barchart: Json<PanelOf<'barchart', barchart.Options, barchart.FieldConfig>>;
  bargauge: Json<PanelOf<'bargauge', bargauge.Options, Record<string, unknown>>>;
  heatmap: Json<PanelOf<'heatmap', heatmap.Options, heatmap.FieldConfig>>;
  piechart: Json<PanelOf<'piechart', piechart.Options, piechart.FieldConfig>>;
  stat: Json<PanelOf<'stat', stat.Options, Record<string, unknown>>>;
  table: Json<PanelOf<'table', table.Options, table.FieldConfig>>;
  timeseries: Json<PanelOf<'timeseries', timeseries.Options, timeseries.FieldConfig>>;
  xychart: Json<PanelOf<'xychart', xychart.Options, xychart.FieldConfig>>;
}
