-- A time-tracking application's OLTP schema: the demo source.
CREATE TYPE entry_source AS ENUM ('timer', 'manual', 'import');

CREATE TABLE users (
    id bigint PRIMARY KEY,
    email text NOT NULL UNIQUE,
    full_name text NOT NULL,
    active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE clients (
    id integer PRIMARY KEY,
    name text NOT NULL,
    hourly_rate numeric(10,2) NOT NULL,
    country char(2)
);

CREATE TABLE projects (
    id integer PRIMARY KEY,
    client_id integer NOT NULL REFERENCES clients (id),
    name varchar(120) NOT NULL,
    billable boolean NOT NULL DEFAULT true,
    started_on date NOT NULL
);

CREATE TABLE project_members (
    project_id integer NOT NULL REFERENCES projects (id),
    user_id bigint NOT NULL REFERENCES users (id),
    role text NOT NULL,
    joined_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, user_id)
);

CREATE TABLE time_entries (
    id uuid PRIMARY KEY,
    user_id bigint NOT NULL REFERENCES users (id),
    project_id integer NOT NULL REFERENCES projects (id),
    started_at timestamptz NOT NULL,
    stopped_at timestamptz,
    duration interval,
    description text,          -- sometimes large enough to be TOASTed
    tags text[] NOT NULL DEFAULT '{}',
    billable numeric(10,2) NOT NULL DEFAULT 0,
    source entry_source NOT NULL DEFAULT 'timer',
    metadata jsonb
);
ALTER TABLE time_entries ALTER COLUMN description SET STORAGE EXTERNAL;
CREATE INDEX time_entries_started_at ON time_entries (started_at);

-- Scratch data the workload truncates now and then.
CREATE TABLE scratch (
    id bigint PRIMARY KEY,
    note text
);
