-- Which rank started it: collectives, and the origin of a NaN/Inf across the ranks of a run.
--
-- A collective is recognised by its operator type, spelled per producer: msprobe's `Distributed.*`
-- / `Communication.*` APIs (`all_reduce`), MindSpore graph kernels (`AllReduce`, `Receive`) and
-- HCCL kernels of raw/GE dumps (`HcomAllReduce`). `collective_names` maps the spelling (lower case,
-- no `_`, no `hcom` prefix) to one name and a kind:
--   directed   one sender (send, isend, scatter, broadcast) or one receiver (recv, gather, reduce)
--   undirected every rank of the group both sends and receives (all_reduce, all_gather, ...)
-- `gather`, `scatter` and `reduce` are also compute operators (MindSpore's Gather, torch.gather):
-- they count as collectives only under msprobe's Distributed/Communication prefix or as Hcom kernels.
CREATE OR REPLACE MACRO collective_spelling(op_type) AS regexp_replace(lower(op_type), '^hcom|_', '', 'g');

CREATE OR REPLACE VIEW collective_names AS
SELECT * FROM (VALUES
    ('allreduce', 'all_reduce', 'undirected'),
    ('allgather', 'all_gather', 'undirected'),
    ('allgatherintotensor', 'all_gather_into_tensor', 'undirected'),
    ('allgatherbase', 'all_gather_into_tensor', 'undirected'),
    ('reducescatter', 'reduce_scatter', 'undirected'),
    ('reducescattertensor', 'reduce_scatter_tensor', 'undirected'),
    ('reducescatterbase', 'reduce_scatter_tensor', 'undirected'),
    ('alltoall', 'all_to_all', 'undirected'),
    ('alltoallv', 'all_to_all', 'undirected'),
    ('alltoallvc', 'all_to_all', 'undirected'),
    ('alltoallsingle', 'all_to_all', 'undirected'),
    ('barrier', 'barrier', 'undirected'),
    ('broadcast', 'broadcast', 'directed'),
    ('send', 'send', 'directed'),
    ('isend', 'isend', 'directed'),
    ('recv', 'recv', 'directed'),
    ('receive', 'recv', 'directed'),
    ('irecv', 'irecv', 'directed'),
    ('scatter', 'scatter', 'directed'),
    ('collectivescatter', 'scatter', 'directed'),
    ('gather', 'gather', 'directed'),
    ('collectivegather', 'gather', 'directed'),
    ('reduce', 'reduce', 'directed')
) AS t(spelling, collective, kind);

-- communication_ops: one row per collective call (run, rank, step), numbered `instance` = the n-th
-- call of that collective in the step on that rank (0-based), in the rank's own execution order
-- (msprobe: dump.json order; kernels: the step's order as in first_anomaly). The same instance on
-- two ranks is the same collective: joining on it needs no clock, where timestamps of two hosts are
-- not comparable. Inputs and outputs are every tensor of the call, nested ones (all_gather's list)
-- included. Group and peer come from the kernel's arguments where the producer saved them
-- (kernel_args: `group`, `src_rank`/`dest_rank`/`root_rank`, `src`/`dst`; msprobe's reader stores
-- its collectives' `src`/`dst`/group there). Only collectives with dumped tensors appear (a barrier
-- has none).
CREATE OR REPLACE VIEW communication_ops AS
WITH collective_rows AS (
    SELECT s.run, s.rank, s.iteration, s.graph_id, s.op_name, s.timestamp_us, s.exec_index, s.op_type,
           s.io, s.has_nan, s.has_inf, s.nan_count, s.neg_inf_count, s.pos_inf_count,
           n.collective, n.kind,
           -- the k-th execution of a kernel in the step: its k-th tensor of each argument (the files
           -- of one call may carry different timestamps; msprobe names each call apart)
           row_number() OVER (PARTITION BY s.run, s.rank, s.iteration, s.graph_id, s.op_name, s.io, s.slot,
                                           s.arg_path
                              ORDER BY s.timestamp_us NULLS LAST, s.exec_index NULLS LAST) AS execution
    FROM stats s
    JOIN collective_names n ON n.spelling = collective_spelling(s.op_type)
    WHERE (s.op_name LIKE 'Distributed.%' OR s.op_name LIKE 'Communication.%'
           OR (s.stat_semantics <> 'msprobe'
               AND (n.spelling NOT IN ('gather', 'scatter', 'reduce') OR lower(s.op_type) LIKE 'hcom%')))
      AND s.op_name NOT LIKE '%.backward'
),
calls AS (
    SELECT run, rank, iteration, graph_id, op_name,
           min(timestamp_us) AS timestamp_us, max(timestamp_us) AS end_timestamp_us,
           min(exec_index) AS exec_index, min(op_type) AS op_type,
           min(collective) AS collective, min(kind) AS kind,
           count(*) FILTER (WHERE io = 'input') AS inputs,
           count(*) FILTER (WHERE io = 'output') AS outputs,
           coalesce(bool_or(has_nan OR has_inf) FILTER (WHERE io = 'input'), false) AS input_nonfinite,
           coalesce(bool_or(has_nan OR has_inf) FILTER (WHERE io = 'output'), false) AS output_nonfinite,
           CAST(sum(nan_count) FILTER (WHERE io = 'input') AS BIGINT) AS input_nan_count,
           CAST(sum(nan_count) FILTER (WHERE io = 'output') AS BIGINT) AS output_nan_count,
           CAST(sum(neg_inf_count + pos_inf_count) FILTER (WHERE io = 'input') AS BIGINT) AS input_inf_count,
           CAST(sum(neg_inf_count + pos_inf_count) FILTER (WHERE io = 'output') AS BIGINT) AS output_inf_count
    FROM collective_rows
    GROUP BY run, rank, iteration, graph_id, op_name, execution
),
args AS (
    SELECT run, rank, graph_id, iteration, file_op_name,
           max(CASE WHEN arg_name IN ('group', 'group_ranks') THEN arg_value END) AS grp,
           max(CASE WHEN arg_name IN ('src_rank', 'src', 'root_rank') THEN arg_value END) AS src,
           max(CASE WHEN arg_name IN ('dest_rank', 'dst') THEN arg_value END) AS dst
    FROM kernel_args
    WHERE arg_name IN ('group', 'group_ranks', 'src_rank', 'src', 'root_rank', 'dest_rank', 'dst')
    GROUP BY run, rank, graph_id, iteration, file_op_name
)
SELECT c.run, c.rank, c.iteration,
       row_number() OVER (PARTITION BY c.run, c.rank, c.iteration, c.collective
                          ORDER BY c.timestamp_us NULLS LAST, c.graph_id, c.exec_index NULLS LAST,
                                   c.op_name) - 1 AS instance,
       c.collective, c.kind, c.op_type, c.op_name, c.graph_id, c.exec_index, c.timestamp_us,
       c.end_timestamp_us, a.grp AS group_name, TRY_CAST(a.src AS INTEGER) AS src, TRY_CAST(a.dst AS INTEGER) AS dst,
       c.inputs, c.outputs, c.input_nonfinite, c.output_nonfinite,
       c.input_nan_count, c.output_nan_count, c.input_inf_count, c.output_inf_count
FROM calls c
LEFT JOIN args a
       ON a.run = c.run AND a.rank = c.rank AND a.graph_id IS NOT DISTINCT FROM c.graph_id
      AND a.iteration IS NOT DISTINCT FROM c.iteration
      AND (a.file_op_name = c.op_name OR c.op_name LIKE concat('%/', a.file_op_name));

-- nan_origin: one row per run and step with an anomaly. Built from each rank's first anomaly (the
-- order of first_anomaly) and the collectives' instances:
--   * a rank whose first anomalous output is a collective's output (inputs of that call finite)
--     RECEIVED it: through an undirected collective C (instance k) from the ranks whose inputs to
--     instance k of C were non-finite; through a recv/irecv from the ranks whose send/isend in the
--     step had non-finite inputs (the `src` when the producer recorded it); through a broadcast or
--     scatter from the src, or the ranks whose inputs to instance k were non-finite;
--   * a rank whose first anomalous output is a compute operator with finite inputs (or a collective
--     whose inputs were finite on every rank: an overflow in the reduction) is an ORIGIN; the
--     first one (lowest rank among those the received ranks trace back to, else the lowest) is
--     the step's origin, any other is a second origin, listed as such;
--   * a rank whose first anomalous operator already has non-finite inputs (state from an earlier
--     step: parameters, optimizer state) or whose step shows only anomalous inputs INHERITED it.
--     A step with no origin and an inherited rank points back (origin_iteration) to the latest
--     earlier step of the run that has one, whose origin it repeats.
-- Statistics without counts (msprobe's dump.json: has_nan from Max/Min/Mean) still decide all of
-- this; only the nan/inf counts are NULL.
--
-- It is computed in two parts. `nan_origin_ranks` is the per-rank summary: one row per run, rank and
-- step with an anomaly, its first anomaly, the state it is in (`kind_of`: origin, received, inherited),
-- the ranks it received it from and whether it sent it to a received rank (`traced`). It depends on
-- the snapshot alone, so a snapshot's views database stores it (catalog/views.py STORED_VIEWS), like
-- `communication_ops`; `nan_origin` then answers each step from those few rows.
CREATE OR REPLACE VIEW nan_origin_ranks AS
WITH comm AS MATERIALIZED (
    SELECT run, rank, iteration, graph_id, op_name, timestamp_us, end_timestamp_us, collective, kind,
           instance, src, dst, input_nonfinite
    FROM communication_ops
),
firsts AS MATERIALIZED (  -- first_anomaly's answer, and whether that call's own inputs were non-finite
    -- One call of a kernel: its place in the execution order where the dump has one (MindSpore
    -- writes each input and output file with a timestamp of its own), else its timestamp (one
    -- file per call in raw/GE dumps; msprobe names each call apart).
    SELECT DISTINCT ON (run, rank, iteration) *
    FROM (
        SELECT run, rank, iteration, graph_id, exec_index, timestamp_us, op_type, op_name, io, slot,
               nan_count, neg_inf_count, pos_inf_count, source_file, source_line, source_code,
               max(CASE WHEN io IN ('input', 'parameter') THEN 1 ELSE 0 END)
                   OVER (PARTITION BY run, rank, iteration, graph_id, op_name,
                                      coalesce(exec_index, timestamp_us)) = 1
                   AS inputs_nonfinite
        FROM anomalous_tensors
    ) a
    ORDER BY run, rank, iteration, io <> 'output', timestamp_us NULLS LAST, graph_id,
             exec_index NULLS LAST, slot
),
ranks AS (
    SELECT f.*, c.collective, c.kind, c.instance, c.src AS call_src,
           CASE WHEN f.io <> 'output' OR f.inputs_nonfinite THEN 'inherited'
                WHEN c.collective IS NOT NULL THEN 'received'
                ELSE 'origin' END AS state
    FROM firsts f
    LEFT JOIN comm c
           ON c.run = f.run AND c.rank = f.rank AND c.iteration IS NOT DISTINCT FROM f.iteration
          AND c.op_name = f.op_name AND c.graph_id IS NOT DISTINCT FROM f.graph_id
          AND (f.timestamp_us IS NULL OR f.timestamp_us BETWEEN c.timestamp_us AND c.end_timestamp_us)
),
sender_rows AS (  -- for each received rank, each rank it got it from
    SELECT DISTINCT r.run, r.iteration, r.rank, c.rank AS from_rank
    FROM ranks r
    JOIN comm c
      ON c.run = r.run AND c.iteration IS NOT DISTINCT FROM r.iteration AND c.rank <> r.rank
     AND c.input_nonfinite
     AND CASE WHEN r.collective IN ('recv', 'irecv')
                   THEN c.collective IN ('send', 'isend') AND (c.dst IS NULL OR c.dst = r.rank)
                        AND (r.call_src IS NULL OR c.rank = r.call_src)
              ELSE c.collective = r.collective AND c.instance = r.instance
                   AND (r.call_src IS NULL OR c.rank = r.call_src) END
    WHERE r.state = 'received'
),
senders AS (
    SELECT run, iteration, rank, list(from_rank ORDER BY from_rank) AS from_ranks
    FROM sender_rows
    GROUP BY run, iteration, rank
),
classified AS (  -- a collective whose inputs were finite everywhere made the NaN itself: an origin
    SELECT r.*, s.from_ranks,
           CASE WHEN r.state = 'received' AND s.from_ranks IS NULL THEN 'origin' ELSE r.state END AS kind_of
    FROM ranks r
    LEFT JOIN senders s ON s.run = r.run AND s.rank = r.rank AND s.iteration IS NOT DISTINCT FROM r.iteration
),
senders_of AS (  -- ranks some received rank got it from
    SELECT DISTINCT run, iteration, from_rank AS rank
    FROM sender_rows
)
SELECT c.run, c.rank, c.iteration, c.kind_of, t.rank IS NOT NULL AS traced, c.collective, c.instance,
       c.from_ranks, c.op_type, c.op_name, c.io, c.slot, c.nan_count, c.neg_inf_count, c.pos_inf_count,
       c.source_file, c.source_line, c.source_code
FROM classified c
LEFT JOIN senders_of t
       ON t.run = c.run AND t.iteration IS NOT DISTINCT FROM c.iteration AND t.rank = c.rank;

-- The step's answer from the per-rank rows: reached and inherited ranks, the origin (the lowest
-- origin rank some received rank traces back to, else the lowest origin rank, else on the run's
-- first anomalous step the lowest inherited rank), and for a step without one the latest earlier
-- step of the run with one.
CREATE OR REPLACE VIEW nan_origin AS
WITH classified AS (
    SELECT * FROM nan_origin_ranks
),
reached AS (
    SELECT run, iteration,
           list({'rank': rank, 'collective': collective, 'instance': instance, 'op_name': op_name,
                 'from_ranks': from_ranks} ORDER BY rank) AS reached
    FROM classified
    WHERE kind_of = 'received'
    GROUP BY run, iteration
),
inherited AS (
    SELECT run, iteration, list(rank ORDER BY rank) AS inherited_ranks, min(rank) AS first_inherited
    FROM classified
    WHERE kind_of = 'inherited'
    GROUP BY run, iteration
),
steps AS (
    SELECT run, iteration,
           count(*) AS anomalous_ranks,
           min(CASE WHEN kind_of = 'origin' AND traced THEN rank END) AS traced_origin,
           min(CASE WHEN kind_of = 'origin' THEN rank END) AS any_origin
    FROM classified
    GROUP BY run, iteration
),
own AS (  -- the origin of each step that has one; the run's first anomalous step always has one
    SELECT s.run, s.iteration, s.anomalous_ranks,
           coalesce(s.traced_origin, s.any_origin,
                    CASE WHEN s.iteration = min(s.iteration) OVER (PARTITION BY s.run)
                         THEN i.first_inherited END) AS origin_rank,
           s.traced_origin IS NULL AND s.any_origin IS NULL AS unseen
    FROM steps s
    LEFT JOIN inherited i ON i.run = s.run AND i.iteration IS NOT DISTINCT FROM s.iteration
),
born AS (
    SELECT o.run, o.iteration, o.origin_rank, o.unseen, c.op_type, c.op_name, c.io, c.slot, c.nan_count,
           c.neg_inf_count, c.pos_inf_count, c.source_file, c.source_line, c.source_code,
           c.collective IS NOT NULL AS in_collective
    FROM own o
    JOIN classified c
      ON c.run = o.run AND c.iteration IS NOT DISTINCT FROM o.iteration AND c.rank = o.origin_rank
),
earlier AS (  -- for a step without an origin of its own, the latest earlier step of the run with one
    SELECT o.run, o.iteration, max(p.iteration) AS born_at
    FROM own o
    JOIN born p ON p.run = o.run AND p.iteration < o.iteration
    WHERE o.origin_rank IS NULL
    GROUP BY o.run, o.iteration
),
seconds AS (
    SELECT c.run, c.iteration,
           list({'rank': c.rank, 'op_name': c.op_name, 'source_file': c.source_file,
                 'source_line': c.source_line} ORDER BY c.rank) AS second_origins
    FROM classified c
    JOIN own o ON o.run = c.run AND o.iteration IS NOT DISTINCT FROM c.iteration
    WHERE c.kind_of = 'origin' AND c.rank <> o.origin_rank
    GROUP BY c.run, c.iteration
)
SELECT o.run, o.iteration,
       coalesce(b.iteration, pb.iteration) AS origin_iteration,
       b.iteration IS NOT NULL AS new_origin,
       coalesce(b.origin_rank, pb.origin_rank) AS origin_rank,
       coalesce(b.op_type, pb.op_type) AS op_type,
       coalesce(b.op_name, pb.op_name) AS op_name,
       coalesce(b.io, pb.io) AS io, coalesce(b.slot, pb.slot) AS slot,
       coalesce(b.nan_count, pb.nan_count) AS nan_count,
       coalesce(b.neg_inf_count, pb.neg_inf_count) AS neg_inf_count,
       coalesce(b.pos_inf_count, pb.pos_inf_count) AS pos_inf_count,
       coalesce(b.source_file, pb.source_file) AS source_file,
       coalesce(b.source_line, pb.source_line) AS source_line,
       coalesce(b.source_code, pb.source_code) AS source_code,
       CASE WHEN b.unseen THEN 'inputs already non-finite at the run''s first anomalous step: born in an '
                                || 'operator the dump does not show'
            WHEN b.in_collective THEN 'inputs finite on every rank, collective output non-finite'
            WHEN b.origin_rank IS NOT NULL THEN 'inputs finite, output non-finite'
            WHEN pb.origin_rank IS NOT NULL
                THEN 'state already non-finite at the step''s start: origin at step '
                     || CAST(pb.iteration AS VARCHAR)
            ELSE 'inputs already non-finite, no earlier step with an origin' END AS reason,
       r.reached, i.inherited_ranks, s.second_origins, o.anomalous_ranks
FROM own o
LEFT JOIN born b ON b.run = o.run AND b.iteration IS NOT DISTINCT FROM o.iteration
LEFT JOIN earlier e ON e.run = o.run AND e.iteration IS NOT DISTINCT FROM o.iteration
LEFT JOIN born pb ON pb.run = e.run AND pb.iteration = e.born_at
LEFT JOIN reached r ON r.run = o.run AND r.iteration IS NOT DISTINCT FROM o.iteration
LEFT JOIN inherited i ON i.run = o.run AND i.iteration IS NOT DISTINCT FROM o.iteration
LEFT JOIN seconds s ON s.run = o.run AND s.iteration IS NOT DISTINCT FROM o.iteration;
